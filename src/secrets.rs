//! Provider secrets read at run time from AWS Secrets Manager, so no signing secret or API key
//! sits in a Lambda's environment (where `lambda:GetFunctionConfiguration` shows it), and a
//! rotation needs no redeploy.
//!
//! The environment names the secrets (`PAYHOOK_{PROVIDER}_SECRETS_ARN`,
//! `PAYHOOK_{PROVIDER}_API_KEY_ARN`: a name or an ARN), never their values. A signing secret is
//! read in every version Secrets Manager's rotation labels, `AWSCURRENT`, `AWSPENDING` and
//! `AWSPREVIOUS`, and all of them verify: that is the several-secrets rotation payhook already
//! supports, so a rotation never rejects a webhook signed with either side. An API key is read
//! as `AWSCURRENT` only (a call is made with one key).
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

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("Secrets Manager could not read {secret_id} ({stage})")]
    Unavailable {
        secret_id: String,
        stage: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{secret_id} has no {stage} version with a string value")]
    Missing {
        secret_id: String,
        stage: &'static str,
    },
}

/// Reads the configured secrets.
pub struct SecretSource {
    client: aws_sdk_secretsmanager::Client,
    refs: Vec<SecretRef>,
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSource")
            .field("refs", &self.refs)
            .finish_non_exhaustive()
    }
}

impl SecretSource {
    pub fn new(client: aws_sdk_secretsmanager::Client, refs: Vec<SecretRef>) -> Self {
        SecretSource { client, refs }
    }

    pub fn refs(&self) -> &[SecretRef] {
        &self.refs
    }

    /// Every target's value now: all or nothing, so a refresh that fails half-way keeps the
    /// last good set whole.
    pub async fn read(&self) -> Result<BTreeMap<&'static str, String>, SecretsError> {
        let mut values = BTreeMap::new();
        for r in &self.refs {
            let stages: &[&'static str] = if r.rotating {
                &ROTATION_STAGES
            } else {
                &ROTATION_STAGES[..1]
            };
            let mut found: Vec<String> = Vec::new();
            for stage in stages {
                if let Some(v) = self.version(&r.secret_id, stage).await? {
                    for s in v.split_whitespace() {
                        if !found.iter().any(|f| f == s) {
                            found.push(s.to_owned());
                        }
                    }
                } else if *stage == "AWSCURRENT" {
                    return Err(SecretsError::Missing {
                        secret_id: r.secret_id.clone(),
                        stage,
                    });
                }
            }
            values.insert(r.target, found.join(" "));
        }
        Ok(values)
    }

    /// One stage's string value; `None` when the secret has no version in that stage (no
    /// rotation under way: no `AWSPENDING`; never rotated: no `AWSPREVIOUS`).
    async fn version(
        &self,
        secret_id: &str,
        stage: &'static str,
    ) -> Result<Option<String>, SecretsError> {
        let out = self
            .client
            .get_secret_value()
            .secret_id(secret_id)
            .version_stage(stage)
            .send()
            .await;
        match out {
            Ok(v) => Ok(v.secret_string().map(str::to_owned)),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), GetSecretValueError::ResourceNotFoundException(_))
                    && stage != "AWSCURRENT" =>
            {
                Ok(None)
            }
            Err(e) => Err(SecretsError::Unavailable {
                secret_id: secret_id.to_owned(),
                stage,
                source: Box::new(e),
            }),
        }
    }
}
