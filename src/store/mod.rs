//! The seam between the code that decides and the code that stores: the error every store
//! call can give. The capability traits live beside the types they speak
//! ([`crate::idempotency::Claims`], [`crate::payments::Payments`], [`crate::ledger::Ledger`],
//! [`crate::eventlog::EventLog`]) and return this error; [`crate::dynamodb`] implements them.
//! The error is the claim crate's (`dynamo_claim::StoreError`), so a claim's failure and any other
//! table's travel by one `?`. This module imports nothing of payhook, so every layer can see it
//! and no import runs back up.

pub use dynamo_claim::StoreError;
