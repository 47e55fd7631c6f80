//! Provider secrets read at run time from AWS Secrets Manager, so no signing secret or API key
//! sits in a Lambda's environment (where `lambda:GetFunctionConfiguration` shows it), and a
//! rotation needs no redeploy.
//!
//! The environment names the secrets (`PAYHOOK_{PROVIDER}_SECRETS_ARN`,
//! `PAYHOOK_{PROVIDER}_API_KEY_ARN`: a name or an ARN), never their values. A signing secret is
//! read in every version Secrets Manager's rotation labels, `AWSCURRENT`, `AWSPENDING` and
//! `AWSPREVIOUS`: that is the several-secrets rotation payhook already supports, so a rotation
//! never rejects a webhook signed with either side. An API key is read as `AWSCURRENT` only (a
//! call is made with one key).
//!
//! Revocation (issue #31): a version no stage holds is never read, so it stops verifying at the
//! next refresh. `AWSPREVIOUS` verifies only for a bounded grace after the version that demoted
//! it was created (the `AWSCURRENT` version's `CreatedDate`, as Secrets Manager reports it: no
//! process clock or restart moves it), so an emergency `put-secret-value` ends the leaked secret
//! by itself once the grace is over, and removing the `AWSPREVIOUS` label ends it at the next
//! refresh. A secret that is deleted, scheduled for deletion or not found is revoked, not an
//! outage: its provider has no secret (503) from the next refresh on. Only an outage (network,
//! throttling, a 5xx) keeps the last good secrets.
//!
//! `GetSecretValue` per version stage, not `BatchGetSecretValue`: the batch call returns only
//! `AWSCURRENT`, and the pending and previous versions are the point.

use std::collections::BTreeMap;

use aws_sdk_secretsmanager::error::SdkError;
use aws_sdk_secretsmanager::operation::get_secret_value::GetSecretValueError;

/// The version stages a signing secret is read in.
pub const ROTATION_STAGES: [&str; 3] = ["AWSCURRENT", "AWSPENDING", "AWSPREVIOUS"];

/// One secret to read: which env value it fills, where it lives, and whether every rotation
/// stage is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// The variable whose value it is (`PAYHOOK_GENERIC_SECRETS`).
    pub target: &'static str,
    /// The secret's name or ARN.
    pub secret_id: String,
    /// Signing secrets: every stage, space-separated. API keys: `AWSCURRENT` only.
    pub rotating: bool,
}

/// How long `AWSPREVIOUS` still verifies after the version that demoted it was created, unless
/// `PAYHOOK_SECRET_PREVIOUS_GRACE_S` says otherwise: an hour covers a sender that switches a few
/// minutes late, and bounds a secret that leaked and was rotated away in a hurry.
pub const DEFAULT_PREVIOUS_GRACE_MS: i64 = 3_600_000;

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("Secrets Manager could not read {secret_id} ({stage})")]
    Unavailable {
        secret_id: String,
        stage: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Reads the configured secrets.
pub struct SecretSource {
    client: aws_sdk_secretsmanager::Client,
    refs: Vec<SecretRef>,
    previous_grace_ms: i64,
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSource")
            .field("refs", &self.refs)
            .field("previous_grace_ms", &self.previous_grace_ms)
            .finish_non_exhaustive()
    }
}

/// One stage as read: its value and when its version was created (ms since the epoch).
struct Version {
    value: Option<String>,
    created_ms: Option<i64>,
}

/// What a stage's read found.
enum Read {
    Found(Version),
    /// The secret has no version in that stage.
    NoSuchStage,
    /// The secret is deleted, scheduled for deletion or not found: revoked.
    Gone,
}

impl SecretSource {
    pub fn new(client: aws_sdk_secretsmanager::Client, refs: Vec<SecretRef>) -> Self {
        SecretSource {
            client,
            refs,
            previous_grace_ms: DEFAULT_PREVIOUS_GRACE_MS,
        }
    }

    /// How long `AWSPREVIOUS` still verifies after the current version was created.
    pub fn with_previous_grace_ms(mut self, grace_ms: i64) -> Self {
        self.previous_grace_ms = grace_ms.max(0);
        self
    }

    pub fn refs(&self) -> &[SecretRef] {
        &self.refs
    }

    /// Every target's value now: all or nothing, so a refresh that fails half-way keeps the
    /// last good set whole. A revoked secret (deleted, not found, no `AWSCURRENT`) maps to an
    /// empty value: its provider is left out until it exists again. The secrets are read
    /// concurrently, so a refresh on the request path waits for the slowest, not the sum.
    pub async fn read(&self) -> Result<BTreeMap<&'static str, String>, SecretsError> {
        let now_ms = crate::domain::now_ms();
        let reads = self.refs.iter().map(|r| self.one(r, now_ms));
        let values = futures::future::try_join_all(reads).await?;
        Ok(self.refs.iter().map(|r| r.target).zip(values).collect())
    }

    /// One secret's value: its current version, the pending one, and the previous one while
    /// its grace lasts (rotating secrets only); empty when revoked.
    async fn one(&self, r: &SecretRef, now_ms: i64) -> Result<String, SecretsError> {
        let current = match self.version(&r.secret_id, "AWSCURRENT").await? {
            Read::Found(v) if v.value.is_some() => v,
            Read::Found(_) | Read::NoSuchStage => {
                tracing::warn!(secret = %r.secret_id, "secret has no AWSCURRENT string value: revoked, its provider answers 503");
                return Ok(String::new());
            }
            Read::Gone => {
                tracing::warn!(secret = %r.secret_id, "secret deleted or not found: revoked, its provider answers 503");
                return Ok(String::new());
            }
        };
        let mut found: Vec<String> = Vec::new();
        let mut add = |v: &str| {
            for s in v.split_whitespace() {
                if !found.iter().any(|f| f == s) {
                    found.push(s.to_owned());
                }
            }
        };
        add(current.value.as_deref().unwrap_or_default());
        if r.rotating {
            let (pending, previous) = futures::future::join(
                self.version(&r.secret_id, "AWSPENDING"),
                self.version(&r.secret_id, "AWSPREVIOUS"),
            )
            .await;
            if let Read::Found(v) = pending? {
                add(v.value.as_deref().unwrap_or_default());
            }
            if let Read::Found(v) = previous? {
                // Demoted when the current version came in: no later than its creation.
                // Unknown creation: no grace (fail closed).
                let in_grace = current
                    .created_ms
                    .is_some_and(|c| now_ms < c.saturating_add(self.previous_grace_ms));
                if in_grace {
                    add(v.value.as_deref().unwrap_or_default());
                } else {
                    tracing::debug!(secret = %r.secret_id, "AWSPREVIOUS past its grace: not verifying");
                }
            }
        }
        Ok(found.join(" "))
    }

    /// One stage's string value and creation date.
    async fn version(&self, secret_id: &str, stage: &'static str) -> Result<Read, SecretsError> {
        let out = self
            .client
            .get_secret_value()
            .secret_id(secret_id)
            .version_stage(stage)
            .send()
            .await;
        match out {
            Ok(v) => Ok(Read::Found(Version {
                value: v.secret_string().map(str::to_owned),
                created_ms: v.created_date().and_then(|d| d.to_millis().ok()),
            })),
            // No version in that stage (no rotation under way: no AWSPENDING; never rotated:
            // no AWSPREVIOUS), or for AWSCURRENT: no such secret.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), GetSecretValueError::ResourceNotFoundException(_)) =>
            {
                Ok(if stage == "AWSCURRENT" {
                    Read::Gone
                } else {
                    Read::NoSuchStage
                })
            }
            // GetSecretValue's only cause of this one: the secret is scheduled for deletion.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), GetSecretValueError::InvalidRequestException(_)) =>
            {
                Ok(Read::Gone)
            }
            Err(e) => Err(SecretsError::Unavailable {
                secret_id: secret_id.to_owned(),
                stage,
                source: Box::new(e),
            }),
        }
    }
}
