//! Stripe events through Amazon EventBridge: Stripe's event destinations can deliver to a
//! partner event bus instead of a webhook endpoint. An EventBridge rule on that bus invokes the
//! webhook function with `{"source","detail-type","detail",…}`, where `detail` is the Stripe event
//! itself. AWS authenticates the partner source, so there is no signature; an event from any
//! other source is refused. `detail` is mapped by the same code as the webhook, so a payment that
//! arrives through both doors (during a migration) has one key and is credited once.

use super::{Stripe, ACCOUNT_KEY};
use crate::providers::{EventSourceDef, Provider, ProviderConfigError, ProviderEnv};

/// The variable naming the accepted partner event source.
pub const SOURCE_VAR: &str = "PAYHOOK_STRIPE_EVENT_SOURCE";

pub const EVENT_SOURCE: EventSourceDef = EventSourceDef {
    source_var: SOURCE_VAR,
    mapper,
};

fn mapper(env: ProviderEnv<'_>) -> Result<Box<dyn Provider>, ProviderConfigError> {
    let account_key = env.metadata_key(ACCOUNT_KEY)?;
    Ok(Box::new(Stripe::mapper(&account_key)))
}
