//! Partial batch responses for SQS (and Kinesis, DynamoDB streams): each record of a batch run
//! at most once per key, and the records that must come again reported as
//! `batchItemFailures`, so the event source mapping (with `ReportBatchItemFailures`) redelivers
//! only those. As Powertools' batch utility, FIFO-aware.
//!
//! | a record's answer                           | reported          | why                                        |
//! |---------------------------------------------|-------------------|--------------------------------------------|
//! | ran, replayed, done before (not recorded)   | processed         | its effect happened once                   |
//! | in progress elsewhere                       | failed            | the first attempt may still fail: SQS must keep it |
//! | another payload under its key               | failed            | never silently dropped: it reaches the DLQ |
//! | the handler or the store failed, no key     | failed            | redelivered, then the DLQ                  |
//! | a FIFO group that already failed this batch | failed, unrun     | a FIFO group's order is its meaning        |

use std::collections::HashSet;
use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::idempotent::{Answer, Attempt, Deadline, Failed, Idempotency};
use crate::store::Store;

/// The answer a Lambda with `ReportBatchItemFailures` returns:
/// `{"batchItemFailures":[{"itemIdentifier":"…"}]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchResponse {
    /// The records the source must deliver again.
    pub batch_item_failures: Vec<ItemFailure>,
}

/// One record to deliver again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemFailure {
    /// The record's id (SQS `messageId`, Kinesis `sequenceNumber`).
    pub item_identifier: String,
}

/// What the batch needs to know of a record besides its key: its id, and its FIFO group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchItem {
    /// The id the source redelivers it by (SQS `messageId`).
    pub id: String,
    /// Its FIFO message group (`attributes.MessageGroupId`): after a failure in a group, the
    /// group's later records in the batch are failed without running. `None`: a standard
    /// queue's record.
    pub group: Option<String>,
}

impl<E: Serialize + 'static, S: Store> Idempotency<E, S> {
    /// Runs `handler` for each record in order, each at most once per key, and reports the
    /// records to deliver again (the table above).
    ///
    /// ```no_run
    /// # async fn demo(once: dynamo_claim::Idempotency<serde_json::Value>, records: Vec<serde_json::Value>) {
    /// use dynamo_claim::{BatchItem, Failed};
    /// let item = |r: &serde_json::Value| BatchItem {
    ///     id: r["messageId"].as_str().unwrap_or_default().to_owned(),
    ///     group: r["attributes"]["MessageGroupId"].as_str().map(str::to_owned),
    /// };
    /// let response = once
    ///     .batch(&records, item, None, |_record, _attempt| async {
    ///         Ok::<_, Failed<std::io::Error>>("charged".to_owned())
    ///     })
    ///     .await;
    /// # let _ = response;
    /// # }
    /// ```
    pub async fn batch<'r, R, X, F, Fut>(
        &self,
        records: impl IntoIterator<Item = &'r E>,
        item: impl Fn(&E) -> BatchItem,
        deadline: Option<Deadline>,
        handler: F,
    ) -> BatchResponse
    where
        E: 'r,
        R: Serialize + DeserializeOwned,
        F: Fn(&'r E, Attempt) -> Fut,
        Fut: Future<Output = Result<R, Failed<X>>>,
    {
        let mut failed_groups = HashSet::new();
        let mut response = BatchResponse::default();
        for record in records {
            let BatchItem { id, group } = item(record);
            let unrun = group.as_ref().is_some_and(|g| failed_groups.contains(g));
            let processed = !unrun
                && matches!(
                    self.run(record, deadline, |attempt| handler(record, attempt))
                        .await,
                    Ok(Answer::Ran(_) | Answer::Replayed(_) | Answer::DoneUnrecorded)
                );
            if !processed {
                if let Some(g) = group {
                    failed_groups.insert(g);
                }
                response.batch_item_failures.push(ItemFailure {
                    item_identifier: id,
                });
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::MemoryStore;

    #[derive(serde::Serialize)]
    struct Record {
        id: &'static str,
        order: &'static str,
        group: Option<&'static str>,
        fails: bool,
    }

    fn item(r: &Record) -> BatchItem {
        BatchItem {
            id: r.id.into(),
            group: r.group.map(str::to_owned),
        }
    }

    fn failures(r: &BatchResponse) -> Vec<&str> {
        r.batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect()
    }

    fn records(fifo: bool) -> Vec<Record> {
        let g = |name| fifo.then_some(name);
        vec![
            Record {
                id: "m1",
                order: "o1",
                group: g("A"),
                fails: false,
            },
            Record {
                id: "m2",
                order: "o2",
                group: g("A"),
                fails: true,
            },
            Record {
                id: "m3",
                order: "o3",
                group: g("A"),
                fails: false,
            },
            Record {
                id: "m4",
                order: "o4",
                group: g("B"),
                fails: false,
            },
            Record {
                id: "m5",
                order: "o1",
                group: g("B"),
                fails: false,
            },
        ]
    }

    async fn run(fifo: bool) -> (BatchResponse, Vec<&'static str>, BatchResponse) {
        let once = Idempotency::key_path(MemoryStore::new(), "/order")
            .prefix("")
            .validate_path("/order");
        let ran = Mutex::new(Vec::new());
        let rs = records(fifo);
        let handler = |r: &Record, _| {
            let ran = &ran;
            let (id, fails) = (r.id, r.fails);
            async move {
                ran.lock().unwrap().push(id);
                if fails {
                    return Err(Failed::Before("refused".to_owned()));
                }
                Ok(format!("ch_{id}"))
            }
        };
        let first = once.batch(&rs, item, None, handler).await;
        let again = once.batch(&rs, item, None, handler).await;
        let ran = ran.lock().unwrap().clone();
        (first, ran, again)
    }

    #[tokio::test]
    async fn a_standard_batch_fails_only_what_failed_and_replays_the_rest() {
        let (first, ran, again) = run(false).await;
        // m5 carries o1 again: replayed, not charged twice.
        assert_eq!(failures(&first), ["m2"]);
        assert_eq!(ran, ["m1", "m2", "m3", "m4", "m2"]);
        assert_eq!(failures(&again), ["m2"]);
    }

    #[tokio::test]
    async fn a_fifo_group_that_failed_fails_its_later_records_unrun() {
        let (first, ran, _) = run(true).await;
        assert_eq!(failures(&first), ["m2", "m3"]);
        assert_eq!(&ran[..3], ["m1", "m2", "m4"]);
        let batch = serde_json::to_value(&first).unwrap();
        assert_eq!(batch["batchItemFailures"][1]["itemIdentifier"], "m3");
    }
}
