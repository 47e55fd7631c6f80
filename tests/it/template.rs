//! template.yaml checked against the code, offline: the env vars it sets (`config::env_vars()`),
//! the tables it declares (`dynamodb::schema::ALL`, streams included), the IAM it grants
//! (the DynamoDB calls in `src/dynamodb/*.rs`), the routes it exposes (the webhook open,
//! `http::read::READ_ROUTES` behind AWS_IAM), the change-event pipes and their roles, and
//! `cfn-lint`.
//!
//! Nothing here is a second list of tables, keys or variables: each check walks the code's own
//! definition and looks the template up from it.
//!
//! The env rule: every name in `env_vars()` is set on the webhook function (a variable the
//! function ignores in Lambda, like `PAYHOOK_LEASE_MS`, is still set, so the rule stays one
//! line), except those described "local: …" (`PAYHOOK_READ_TOKEN`), which no function may set:
//! in Lambda reads are IAM-authorized, and a token there would be a second, weaker door. Provider secrets are set through `!If [Has…, {{resolve:…}}, AWS::NoValue]`
//! and count as set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use payhook::config::env_vars;
use payhook::dynamodb::schema::{TableDef, ALL};
use payhook::http::payouts::PAYOUT_ROUTES;
use payhook::http::read::READ_ROUTES;
use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// CloudFormation short tags (`!Ref X`, `!GetAtt A.B`, `!Sub s`, `!If [..]`, …) rewritten to
/// their long form (`{"Ref": X}`, `{"Fn::GetAtt": [A, B]}`, …), so the rest sees plain JSON.
fn long_form(v: serde_yaml::Value) -> Value {
    use serde_yaml::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(&n).unwrap(),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(long_form).collect()),
        Y::Mapping(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        other => serde_yaml::to_string(&other).unwrap().trim().to_owned(),
                    };
                    (key, long_form(v))
                })
                .collect(),
        ),
        Y::Tagged(t) => {
            let tag = t.tag.to_string();
            let tag = tag.trim_start_matches('!');
            let inner = long_form(t.value);
            match tag {
                "Ref" | "Condition" => json!({ tag: inner }),
                "GetAtt" => match inner {
                    Value::String(s) => {
                        let (res, attr) = s
                            .split_once('.')
                            .unwrap_or_else(|| panic!("!GetAtt {s}: want Resource.Attribute"));
                        json!({ "Fn::GetAtt": [res, attr] })
                    }
                    other => json!({ "Fn::GetAtt": other }),
                },
                _ => json!({ format!("Fn::{tag}"): inner }),
            }
        }
    }
}

struct Template {
    doc: Value,
}

impl Template {
    fn load() -> Self {
        let path = root().join("template.yaml");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let yaml: serde_yaml::Value =
            serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("template.yaml: {e}"));
        Template {
            doc: long_form(yaml),
        }
    }

    fn resources(&self) -> &serde_json::Map<String, Value> {
        self.doc["Resources"].as_object().expect("Resources")
    }

    fn of_type<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (&'a String, &'a Value)> + 'a {
        self.resources()
            .iter()
            .filter(move |(_, r)| r["Type"] == kind)
    }

    fn functions(&self) -> Vec<(&String, &Value)> {
        self.of_type("AWS::Serverless::Function").collect()
    }

    /// The function that serves the HTTP API.
    fn webhook(&self) -> (&String, &Value) {
        let with_api: Vec<_> = self
            .functions()
            .into_iter()
            .filter(|(_, f)| {
                events(f).any(|(_, e)| e["Properties"]["Path"] == "/webhooks/{provider}")
            })
            .collect();
        assert_eq!(
            with_api.len(),
            1,
            "exactly one function serves the webhooks, found {:?}",
            with_api.iter().map(|f| f.0).collect::<Vec<_>>()
        );
        with_api[0]
    }

    /// Globals merged with the function's own properties (the function wins), as SAM does for
    /// maps such as Environment.Variables.
    fn prop<'a>(&'a self, function: &'a Value, name: &str) -> Option<&'a Value> {
        function["Properties"]
            .get(name)
            .or_else(|| self.doc["Globals"]["Function"].get(name))
    }

    fn env(&self, function: &Value) -> BTreeMap<String, Value> {
        let mut vars = BTreeMap::new();
        for source in [&self.doc["Globals"]["Function"], &function["Properties"]] {
            if let Some(m) = source["Environment"]["Variables"].as_object() {
                vars.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        vars
    }

    fn parameter_default(&self, name: &str) -> Option<String> {
        scalar(self.doc["Parameters"].get(name)?.get("Default")?)
    }

    /// A scalar value as deployed with default parameters: literals, `!Ref Param` and
    /// `!Sub "...${Param}..."`. None for anything that depends on the deployment.
    fn resolve(&self, v: &Value) -> Option<String> {
        if let Some(s) = scalar(v) {
            return Some(s);
        }
        if let Some(name) = v.get("Ref").and_then(Value::as_str) {
            return self.parameter_default(name);
        }
        let mut text = v.get("Fn::Sub")?.as_str()?.to_owned();
        while let Some(start) = text.find("${") {
            let end = start + text[start..].find('}')?;
            let value = self.parameter_default(&text[start + 2..end])?;
            text.replace_range(start..=end, &value);
        }
        Some(text)
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn events(function: &Value) -> impl Iterator<Item = (&String, &Value)> {
    function["Properties"]["Events"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.iter())
}

fn one_or_many(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(items) => items.iter().collect(),
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

/// The table (logical id) an env var points at: `!Ref LogicalId`.
fn ref_target(v: &Value) -> Option<&str> {
    v.get("Ref").and_then(Value::as_str)
}

// ------------------------------------------------------------------------------- env vars

/// The binary whose variables env_vars() describes as "reconciliation: …".
const RECONCILE_BINARY: &str = "reconcile";

/// Variables of the functions that call providers (reconciliation and payouts): API keys,
/// their URLs, the payout settings.
fn reconcile_only(description: &str) -> bool {
    description.starts_with("reconciliation") || description.starts_with("payouts:")
}

/// The payout function: the one serving `POST /payouts`.
fn serves_payouts(function: &Value) -> bool {
    events(function).any(|(_, e)| e["Properties"]["Path"] == "/payouts")
}

/// Variables only `payhook serve` reads; never set in Lambda.
fn local_only(description: &str) -> bool {
    description.starts_with("local:")
}

/// Secrets by name: provider signing secrets and provider API keys (not `*_ACCOUNT_KEY`,
/// which names a metadata field).
fn is_secret(var: &str) -> bool {
    var.ends_with("_SECRETS") || var.ends_with("_API_KEY") || var.ends_with("_BASIC_AUTH")
}

fn binary_of(function: &Value) -> &str {
    function["Metadata"]["BuildProperties"]["Binary"]
        .as_str()
        .unwrap_or_default()
}

/// The env rule, from env_vars() alone: the reconcile binary gets every variable; every other
/// function (the webhook) gets every variable except those described "reconciliation: …", and
/// none of those (least privilege: the webhook never holds provider API keys).
#[test]
fn every_function_sets_exactly_the_env_vars_the_code_reads() {
    let t = Template::load();
    let (webhook, _) = t.webhook();
    let mut problems = Vec::new();
    for (name, f) in t.functions() {
        let env = t.env(f);
        let all = binary_of(f) == RECONCILE_BINARY || serves_payouts(f);
        let vars = env_vars();
        let wanted: Vec<&(&str, &str)> = vars
            .iter()
            // Secret values are never in an environment: their `_ARN` names are.
            .filter(|(n, what)| {
                !local_only(what) && !is_secret(n) && (all || !reconcile_only(what))
            })
            .collect();
        for (var, what) in &wanted {
            if !env.contains_key(*var) {
                problems.push(format!("{name}: missing {var}  ({what})"));
            }
        }
        for var in env.keys() {
            match env_vars().iter().find(|(n, _)| n == var) {
                None => problems.push(format!("{name}: sets {var}, which the code does not read (not in payhook::config::env_vars())")),
                Some((_, what)) if local_only(what) => problems.push(format!("{name}: sets {var}, which only `payhook serve` may read ({what})")),
                Some(_) if is_secret(var) => problems.push(format!("{name}: sets {var}, a secret value (set {var}_ARN, the secret's name, instead)")),
                Some((_, what)) if !all && reconcile_only(what) => {
                    problems.push(format!("{name}: sets {var}, which only {RECONCILE_BINARY} reads ({what})"))
                }
                Some(_) => {}
            }
        }
        for def in ALL {
            if env.get(def.env_var).and_then(ref_target).is_none() {
                problems.push(format!(
                    "{name}: {} must be `!Ref <the {} table>`",
                    def.env_var, def.role
                ));
            }
        }
        eprintln!("{name} sets {} of {} env vars", env.len(), env_vars().len());
    }
    assert!(t.functions().iter().any(|(n, _)| *n == webhook));
    assert!(
        problems.is_empty(),
        "template.yaml vs payhook::config::env_vars():\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn secrets_come_from_secrets_manager_never_from_the_template() {
    let t = Template::load();
    assert!(
        env_vars().iter().any(|(n, _)| is_secret(n)),
        "env_vars() names no secret variable"
    );
    for (name, f) in t.functions() {
        let env = t.env(f);
        for (var, value) in &env {
            let text = value.to_string();
            // No secret value and no dynamic reference (resolved into the environment, where
            // lambda:GetFunctionConfiguration shows it) in any function's environment.
            assert!(
                !text.contains("{{resolve:"),
                "{name}: {var} is a dynamic reference: its value would sit in the environment"
            );
            assert!(!is_secret(var), "{name}: sets the secret value {var}");
        }
        let grants = secret_grants(f);
        for (var, value) in env.iter().filter(|(v, _)| v.ends_with("_ARN")) {
            let target = var.trim_end_matches("_ARN");
            assert!(is_secret(target), "{name}: {var} names no secret variable");
            // `!If [HasX, !Ref XName, !Ref AWS::NoValue]`: the name, from a NoEcho parameter
            // without a default.
            let param = value["Fn::If"][1]["Ref"].as_str().unwrap_or_else(|| {
                panic!("{name}: {var} must be !If [Has…, !Ref <parameter>, !Ref AWS::NoValue]")
            });
            let p = &t.doc["Parameters"][param];
            assert_eq!(
                p["NoEcho"], true,
                "parameter {param} (used by {var}) must be NoEcho"
            );
            assert!(
                scalar(&p["Default"]).unwrap_or_default().is_empty(),
                "parameter {param} must not default to a value"
            );
            // The function may read exactly that secret.
            assert!(
                grants
                    .iter()
                    .any(|g| g.ends_with(&format!("secret:${{{param}}}-??????"))),
                "{name}: reads {var} but may not secretsmanager:GetSecretValue on ${{{param}}}"
            );
        }
        // And no secret it does not name.
        for g in &grants {
            assert!(
                env.iter().any(|(v, value)| v.ends_with("_ARN")
                    && value["Fn::If"][1]["Ref"]
                        .as_str()
                        .is_some_and(|p| g.ends_with(&format!("secret:${{{p}}}-??????")))),
                "{name}: may read {g}, which no variable of its names"
            );
        }
    }
}

/// The secrets a function may `secretsmanager:GetSecretValue` (their `!Sub` ARN texts); no
/// other Secrets Manager action.
fn secret_grants(f: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for policy in one_or_many(&f["Properties"]["Policies"]) {
        for st in one_or_many(&policy["Statement"]) {
            let actions: Vec<&str> = one_or_many(&st["Action"])
                .iter()
                .filter_map(|a| a.as_str())
                .collect();
            if !actions.iter().any(|a| a.starts_with("secretsmanager:")) {
                continue;
            }
            assert_eq!(actions, ["secretsmanager:GetSecretValue"], "{st}");
            for r in one_or_many(&st["Resource"]) {
                out.push(
                    r["Fn::Sub"]
                        .as_str()
                        .unwrap_or_else(|| panic!("{r}"))
                        .to_owned(),
                );
            }
        }
    }
    out
}

#[test]
fn lease_bound_matches_each_function_timeout() {
    let t = Template::load();
    for (name, f) in t.functions() {
        let env = t.env(f);
        let timeout = t
            .prop(f, "Timeout")
            .and_then(|v| t.resolve(v))
            .unwrap_or_else(|| panic!("{name}: no Timeout"));
        let max_lease = env
            .get("PAYHOOK_MAX_LEASE_MS")
            .and_then(|v| t.resolve(v))
            .unwrap_or_else(|| panic!("{name}: no PAYHOOK_MAX_LEASE_MS"));
        let timeout_ms = timeout.parse::<i64>().unwrap() * 1000;
        let lease = env
            .get("PAYHOOK_LEASE_MS")
            .and_then(|v| t.resolve(v))
            .unwrap_or_else(|| panic!("{name}: no PAYHOOK_LEASE_MS"));
        assert!(
            lease.parse::<i64>().unwrap() <= timeout_ms,
            "{name}: PAYHOOK_LEASE_MS {lease} exceeds the timeout"
        );
        assert_eq!(
            max_lease.parse::<i64>().unwrap(),
            timeout_ms,
            "{name}: PAYHOOK_MAX_LEASE_MS must equal Timeout x 1000 so a lease neither outlives nor undercuts the invocation"
        );
    }
}

/// Issue #42, case 4: every function that calls a transfer API can start a call. Inside Lambda
/// a request's lease is at most its deadline less a second, bounded by PAYHOOK_MAX_LEASE_MS
/// (and the reconciler's PAYHOOK_LEASE_MS); the rule is the one `payhook serve` applies at start
/// (payouts::calls::call_fits). A Timeout set by a parameter is checked at its default and at
/// its smallest allowed value.
#[test]
fn every_function_that_pays_out_has_time_for_a_call() {
    let t = Template::load();
    let mut checked = Vec::new();
    for (name, f) in t.functions() {
        let env = t.env(f);
        let Some(bound) = env
            .get("PAYHOOK_PROVIDER_TIMEOUT_MS")
            .and_then(|v| t.resolve(v))
        else {
            continue;
        };
        let bound_ms: i64 = bound.parse().unwrap();
        let ms = |var: &str| -> i64 {
            env.get(var)
                .and_then(|v| t.resolve(v))
                .unwrap_or_else(|| panic!("{name}: no {var}"))
                .parse()
                .unwrap()
        };
        let timeout = t
            .prop(f, "Timeout")
            .unwrap_or_else(|| panic!("{name}: no Timeout"));
        let mut timeouts_s: Vec<i64> = vec![t.resolve(timeout).unwrap().parse().unwrap()];
        if let Some(param) = timeout.get("Ref").and_then(Value::as_str) {
            if let Some(min) = t.doc["Parameters"][param]["MinValue"].as_i64() {
                timeouts_s.push(min);
            }
        }
        for timeout_s in timeouts_s {
            let lease_ms = (timeout_s * 1_000 - 1_000)
                .min(ms("PAYHOOK_MAX_LEASE_MS").min(timeout_s * 1_000))
                .min(ms("PAYHOOK_LEASE_MS"));
            assert!(
                payhook::payouts::calls::call_fits(lease_ms, bound_ms).is_ok(),
                "{name} with Timeout {timeout_s} s: {}",
                payhook::payouts::calls::call_fits(lease_ms, bound_ms).unwrap_err()
            );
        }
        checked.push(name.clone());
    }
    checked.sort();
    assert_eq!(checked, ["PayoutFunction", "ReconcileFunction"]);
}

// ------------------------------------------------------------------------------- tables

fn key_schema(v: &Value) -> (Option<String>, Option<String>) {
    let mut hash = None;
    let mut range = None;
    for k in one_or_many(v) {
        let attr = k["AttributeName"].as_str().map(str::to_owned);
        match k["KeyType"].as_str() {
            Some("HASH") => hash = attr,
            Some("RANGE") => range = attr,
            other => panic!("unexpected KeyType {other:?}"),
        }
    }
    (hash, range)
}

/// Attribute name -> type the schema implies: keys are S, an index range key N where flagged.
fn expected_attributes(def: &TableDef) -> BTreeMap<String, String> {
    let mut attrs = BTreeMap::new();
    attrs.insert(def.hash_key.to_owned(), "S".to_owned());
    if let Some(r) = def.range_key {
        attrs.insert(r.to_owned(), "S".to_owned());
    }
    for ix in def.indexes {
        attrs
            .entry(ix.hash_key.to_owned())
            .or_insert_with(|| "S".to_owned());
        attrs
            .entry(ix.range_key.to_owned())
            .or_insert_with(|| if ix.range_is_number { "N" } else { "S" }.to_owned());
    }
    attrs
}

/// The logical id of `def`'s table, found the way the function finds it: its env var's `!Ref`.
fn table_of<'a>(t: &'a Template, def: &TableDef) -> (&'a str, &'a Value) {
    let (_, f) = t.webhook();
    let logical = t
        .env(f)
        .get(def.env_var)
        .and_then(|v| ref_target(v).map(str::to_owned));
    let logical = logical.unwrap_or_else(|| {
        panic!(
            "{} is not `!Ref <table>` on the webhook function",
            def.env_var
        )
    });
    let (id, r) = t
        .resources()
        .get_key_value(&logical)
        .unwrap_or_else(|| panic!("{} -> !Ref {logical}: no such resource", def.env_var));
    assert_eq!(
        r["Type"], "AWS::DynamoDB::Table",
        "{} -> {logical} is not a DynamoDB table",
        def.env_var
    );
    (id.as_str(), r)
}

#[test]
fn every_table_in_the_schema_is_declared_as_the_code_uses_it() {
    let t = Template::load();
    let mut declared: BTreeSet<&str> = t
        .of_type("AWS::DynamoDB::Table")
        .map(|(id, _)| id.as_str())
        .collect();
    for def in ALL {
        let (id, table) = table_of(&t, &def);
        declared.remove(id);
        let p = &table["Properties"];
        let what = format!("{id} ({} table, {})", def.role, def.env_var);

        assert_eq!(
            key_schema(&p["KeySchema"]),
            (
                Some(def.hash_key.to_owned()),
                def.range_key.map(str::to_owned)
            ),
            "{what}: key schema"
        );

        let attrs: BTreeMap<String, String> = one_or_many(&p["AttributeDefinitions"])
            .into_iter()
            .map(|a| {
                (
                    a["AttributeName"].as_str().unwrap().to_owned(),
                    a["AttributeType"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            attrs,
            expected_attributes(&def),
            "{what}: AttributeDefinitions"
        );

        let indexes: BTreeMap<String, &Value> = one_or_many(&p["GlobalSecondaryIndexes"])
            .into_iter()
            .map(|ix| (ix["IndexName"].as_str().unwrap().to_owned(), ix))
            .collect();
        let want: BTreeSet<&str> = def.indexes.iter().map(|ix| ix.name).collect();
        assert_eq!(
            indexes.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            want,
            "{what}: GSI names"
        );
        for ix in def.indexes {
            let gsi = indexes[ix.name];
            assert_eq!(
                key_schema(&gsi["KeySchema"]),
                (Some(ix.hash_key.to_owned()), Some(ix.range_key.to_owned())),
                "{what}: index {} keys",
                ix.name
            );
            // Indexes project what their queries return, as schema.rs says (never a raw body).
            let projection = &gsi["Projection"];
            if ix.projected.is_empty() {
                assert_eq!(
                    projection["ProjectionType"], "KEYS_ONLY",
                    "{what}: index {} projection",
                    ix.name
                );
            } else {
                assert_eq!(
                    projection["ProjectionType"], "INCLUDE",
                    "{what}: index {} projection",
                    ix.name
                );
                let got: BTreeSet<&str> = one_or_many(&projection["NonKeyAttributes"])
                    .iter()
                    .filter_map(|v| v.as_str())
                    .collect();
                let want: BTreeSet<&str> = ix.projected.iter().copied().collect();
                assert_eq!(got, want, "{what}: index {} projected attributes", ix.name);
            }
            assert!(
                !ix.projected.contains(&"raw_body") && !ix.projected.contains(&"body_z"),
                "{what}: index {} projects a body",
                ix.name
            );
        }
        assert!(
            p.get("LocalSecondaryIndexes").is_none(),
            "{what}: the schema has no LSIs"
        );

        match def.ttl_attribute {
            Some(attr) => {
                assert_eq!(
                    p["TimeToLiveSpecification"]["AttributeName"], attr,
                    "{what}: TTL attribute"
                );
                assert_eq!(
                    p["TimeToLiveSpecification"]["Enabled"], true,
                    "{what}: TTL enabled"
                );
            }
            None => assert!(
                p.get("TimeToLiveSpecification").is_none(),
                "{what}: the schema sets no TTL on this table"
            ),
        }
        match def.stream {
            Some(view) => assert_eq!(
                p["StreamSpecification"]["StreamViewType"], view,
                "{what}: stream"
            ),
            None => assert!(
                p.get("StreamSpecification").is_none(),
                "{what}: schema.rs declares no stream on this table"
            ),
        }
        assert_eq!(p["BillingMode"], "PAY_PER_REQUEST", "{what}: BillingMode");
        assert_eq!(
            p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"], true,
            "{what}: PITR"
        );
        assert_eq!(
            p["DeletionProtectionEnabled"], true,
            "{what}: deletion protection"
        );
        assert_eq!(
            table["DeletionPolicy"], "Retain",
            "{what}: money records survive a stack delete"
        );
    }
    assert!(
        declared.is_empty(),
        "tables in template.yaml that schema.rs does not define: {declared:?}"
    );
}

// ------------------------------------------------------------------------------- IAM

/// The DynamoDB calls the code makes on each table, read from `src/dynamodb/*.rs` and the claim
/// crate's table (`crates/claim/src/table.rs`, all on the idempotency table): each
/// SDK call (`.put_item()`, `.query()`, …) and the `.table_name(…)` it is sent to, resolved to a
/// role through `tables.<role>` directly or through a `let x = …tables.<role>…` binding. Calls
/// whose table cannot be told are returned apart (they may be on any table).
fn code_calls() -> (
    BTreeMap<&'static str, BTreeSet<String>>,
    BTreeSet<String>,
    Vec<String>,
) {
    const CALLS: &[(&str, &str)] = &[
        (".get_item()", "GetItem"),
        (".put_item()", "PutItem"),
        (".update_item()", "UpdateItem"),
        (".delete_item()", "DeleteItem"),
        (".query()", "Query"),
        (".scan()", "Scan"),
        (".batch_get_item()", "BatchGetItem"),
        (".batch_write_item()", "BatchWriteItem"),
        (".transact_get_items()", "TransactGetItems"),
        (".transact_write_items()", "TransactWriteItems"),
        (".describe_table()", "DescribeTable"),
    ];
    let mut by_role: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    let mut anywhere = BTreeSet::new();
    let mut unresolved = Vec::new();
    let dir = root().join("src/dynamodb");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let role_in = |text: &str| {
        ALL.iter()
            .find(|d| text.contains(&format!("tables.{}", d.role)))
            .map(|d| d.role)
    };
    // The store's batched read (`DynamoStore::batch_get(table, …)`) names its table first.
    const HELPERS: &[(&str, &str)] = &[(".batch_get(", "BatchGetItem")];
    for file in files {
        let src = std::fs::read_to_string(&file).unwrap();
        let sites = CALLS.iter().chain(HELPERS).flat_map(|(call, action)| {
            src.match_indices(call)
                .map(move |(at, _)| (at, call, action))
        });
        for (at, call, action) in sites {
            let (arg_start, arg_end) = if HELPERS.iter().any(|(h, _)| h == call) {
                let start = at + call.len();
                (start, start + src[start..].find([',', ')']).unwrap())
            } else {
                let after = &src[at..];
                let Some(tn) = after.find(".table_name(") else {
                    continue;
                };
                let start = at + tn + ".table_name(".len();
                (start, start + src[start..].find(')').unwrap())
            };
            let arg = &src[arg_start..arg_end];
            let role = role_in(arg).or_else(|| {
                let ident = arg.trim().trim_start_matches('&').trim();
                let binding = format!("let {ident} = ");
                let line_start = src[..at].rfind(&binding)?;
                let line = &src[line_start..line_start + src[line_start..].find(';')?];
                role_in(line)
            });
            match role {
                Some(r) => {
                    by_role
                        .entry(r)
                        .or_default()
                        .insert(format!("dynamodb:{action}"));
                }
                None => {
                    let line = src[..at].lines().count();
                    unresolved.push(format!(
                        "{}:{line} {action} on table_name({arg})",
                        file.strip_prefix(root()).unwrap().display()
                    ));
                    anywhere.insert(format!("dynamodb:{action}"));
                }
            }
        }
    }
    // The claim protocol's writes are the claim crate's (`ClaimTable`), which payhook builds on
    // its idempotency table only: each call there is a call on that table. Its development
    // helpers (`create_if_missing`, after the protocol) never run in payhook.
    let adapter = std::fs::read_to_string(dir.join("claims.rs")).unwrap();
    assert!(
        adapter.contains("ClaimTable::with_clock(")
            && adapter.contains("self.tables.idempotency.clone()"),
        "payhook's ClaimTable is no longer built on tables.idempotency: teach this scanner"
    );
    let crate_table = std::fs::read_to_string(root().join("crates/claim/src/table.rs")).unwrap();
    let protocol = crate_table
        .split("pub async fn create_if_missing")
        .next()
        .unwrap();
    for (call, action) in CALLS {
        if protocol.contains(call) {
            by_role
                .entry("idempotency")
                .or_default()
                .insert(format!("dynamodb:{action}"));
        }
    }
    (by_role, anywhere, unresolved)
}

/// What an IAM Resource names: a table (by logical id) and maybe one of its indexes.
fn resource_target(v: &Value) -> Option<(String, Option<String>)> {
    if let Some(att) = v.get("Fn::GetAtt").and_then(Value::as_array) {
        return (att.get(1)? == "Arn").then(|| (att[0].as_str().unwrap().to_owned(), None));
    }
    let sub = v.get("Fn::Sub")?.as_str()?;
    let rest = sub.strip_prefix("${")?;
    let (logical, tail) = rest.split_once(".Arn}")?;
    let index = tail.strip_prefix("/index/")?;
    Some((logical.to_owned(), Some(index.to_owned())))
}

#[test]
fn iam_grants_only_the_calls_the_code_makes_on_declared_tables_and_indexes() {
    let t = Template::load();
    let (calls, anywhere, unresolved) = code_calls();
    if !unresolved.is_empty() {
        eprintln!(
            "note: could not tell the table of these calls; allowed on every table:\n  {}",
            unresolved.join("\n  ")
        );
    }
    eprintln!("src/dynamodb calls, per table: {calls:?}");
    let defs: BTreeMap<&str, TableDef> = ALL.iter().map(|d| (table_of(&t, d).0, *d)).collect();
    for (name, f) in t.functions() {
        let env = t.env(f);
        let policies = one_or_many(&f["Properties"]["Policies"]);
        assert!(
            !policies.is_empty(),
            "{name}: no Policies (SAM would give it none, and it needs DynamoDB)"
        );
        let mut granted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for policy in policies {
            let statements = policy
                .get("Statement")
                .unwrap_or_else(|| panic!("{name}: policy {policy} is not an inline Statement list (no SAM policy templates or managed policies: least privilege is spelled out)"));
            for st in one_or_many(statements) {
                assert_eq!(st["Effect"], "Allow", "{name}: {st}");
                let actions: Vec<&str> = one_or_many(&st["Action"])
                    .into_iter()
                    .map(|a| a.as_str().unwrap())
                    .collect();
                // Secrets: checked by secrets_come_from_secrets_manager_never_from_the_template.
                if actions.iter().all(|a| a.starts_with("secretsmanager:")) {
                    continue;
                }
                for r in one_or_many(&st["Resource"]) {
                    let (logical, index) = resource_target(r).unwrap_or_else(|| panic!("{name}: resource {r} is not a table ARN (!GetAtt T.Arn) or index ARN (!Sub ${{T.Arn}}/index/NAME)"));
                    let def = defs.get(logical.as_str()).unwrap_or_else(|| {
                        panic!("{name}: {logical} is not a table schema.rs defines")
                    });
                    let used = env.get(def.env_var).and_then(ref_target);
                    assert_eq!(
                        used,
                        Some(logical.as_str()),
                        "{name} is granted {logical} but its {} does not point at it",
                        def.env_var
                    );
                    for action in &actions {
                        assert!(!action.contains('*'), "{name}: wildcard action {action}");
                        match &index {
                            Some(ix) => {
                                assert!(
                                    def.indexes.iter().any(|i| i.name == ix),
                                    "{name}: {logical} has no index {ix} in schema.rs"
                                );
                                assert_eq!(*action, "dynamodb:Query", "{name}: on index {logical}/{ix} only Query makes sense, got {action}");
                            }
                            None => {
                                let ok = calls.get(def.role).is_some_and(|c| c.contains(*action))
                                    || anywhere.contains(*action);
                                assert!(ok, "{name}: {action} on {logical}, but src/dynamodb never makes that call on the {} table (it makes {:?})", def.role, calls.get(def.role));
                            }
                        }
                        let target = index
                            .as_ref()
                            .map_or_else(|| logical.clone(), |ix| format!("{logical}/index/{ix}"));
                        granted
                            .entry(target)
                            .or_default()
                            .insert((*action).to_owned());
                    }
                }
            }
        }
        eprintln!("{name} may:");
        for (target, actions) in &granted {
            eprintln!(
                "  {target}: {}",
                actions.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
}

// ------------------------------------------------------------------------------- API, outputs

#[test]
fn the_webhook_route_is_open_and_every_read_route_needs_aws_iam() {
    let t = Template::load();
    let mut routes = Vec::new();
    for (name, f) in t.functions() {
        assert!(
            f["Properties"].get("FunctionUrlConfig").is_none(),
            "{name}: no function URLs"
        );
        for (_, e) in events(f) {
            if e["Type"] == "HttpApi" || e["Type"] == "Api" {
                let p = &e["Properties"];
                let auth = p["Auth"]["Authorizer"].as_str().map(str::to_owned);
                routes.push((
                    e["Type"].as_str().unwrap().to_owned(),
                    p["Method"].as_str().unwrap().to_owned(),
                    p["Path"].as_str().unwrap().to_owned(),
                    auth.clone(),
                ));
                assert_eq!(
                    p["ApiId"],
                    json!({"Ref": "WebhookApi"}),
                    "{name}: every route on the one HTTP API"
                );
                if auth.is_some() {
                    // Reads share the webhook function: their own limits keep them from
                    // crowding out deliveries.
                    let limit = |k: &str| {
                        t.resolve(&p["RouteSettings"][k])
                            .and_then(|v| v.parse::<f64>().ok())
                    };
                    let default = |k: &str| {
                        t.resolve(
                            &t.doc["Resources"]["WebhookApi"]["Properties"]["DefaultRouteSettings"]
                                [k],
                        )
                        .and_then(|v| v.parse::<f64>().ok())
                    };
                    for k in ["ThrottlingBurstLimit", "ThrottlingRateLimit"] {
                        let (read, all) = (limit(k), default(k));
                        assert!(
                            read.is_some() && read < all,
                            "{name} {}: {k} {read:?} must be set below the API's {all:?}",
                            p["Path"]
                        );
                    }
                }
            }
        }
    }
    // The webhook: providers cannot sign with IAM, their signature is the authentication.
    let mut want = vec![(
        "HttpApi".to_owned(),
        "POST".to_owned(),
        "/webhooks/{provider}".to_owned(),
        None,
    )];
    // Every read route the router serves, GET, with AWS_IAM; nothing else.
    want.extend(READ_ROUTES.iter().map(|p| {
        (
            "HttpApi".to_owned(),
            "GET".to_owned(),
            (*p).to_owned(),
            Some("AWS_IAM".to_owned()),
        )
    }));
    // The payout routes, with AWS_IAM (money leaves through them).
    want.extend(PAYOUT_ROUTES.iter().map(|(method, p)| {
        (
            "HttpApi".to_owned(),
            (*method).to_owned(),
            (*p).to_owned(),
            Some("AWS_IAM".to_owned()),
        )
    }));
    routes.sort();
    want.sort();
    assert_eq!(routes, want);
    let apis: Vec<_> = t.of_type("AWS::Serverless::HttpApi").collect();
    assert_eq!(apis.len(), 1, "one HTTP API");
    let p = &apis[0].1["Properties"];
    assert_eq!(
        p["Auth"]["EnableIamAuthorizer"], true,
        "routes can only name AWS_IAM with it enabled"
    );
    assert!(
        p["Auth"].get("DefaultAuthorizer").is_none(),
        "a default authorizer would close the webhook route to providers"
    );
    assert!(
        p["DefaultRouteSettings"]["ThrottlingBurstLimit"].is_number()
            || p["DefaultRouteSettings"]["ThrottlingBurstLimit"].is_object()
    );
    assert!(
        p["DefaultRouteSettings"]["ThrottlingRateLimit"].is_number()
            || p["DefaultRouteSettings"]["ThrottlingRateLimit"].is_object()
    );
    assert!(
        p["AccessLogSettings"]["DestinationArn"].is_object(),
        "access logs go to a log group"
    );
    assert!(
        t.of_type("AWS::Serverless::Api").next().is_none(),
        "no REST API"
    );
}

// ------------------------------------------------------------------------------- change events

/// `!GetAtt Logical.Attr` -> (Logical, Attr).
fn get_att(v: &Value) -> Option<(&str, &str)> {
    let a = v.get("Fn::GetAtt")?.as_array()?;
    Some((a.first()?.as_str()?, a.get(1)?.as_str()?))
}

#[test]
fn change_events_flow_from_the_streams_through_pipes_with_least_privilege_roles() {
    let t = Template::load();
    let buses: Vec<&String> = t
        .of_type("AWS::Events::EventBus")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(buses, ["PayhookEventBus"], "one bus");
    let output = &t.doc["Outputs"]["PayhookEventBus"]["Value"];
    assert_eq!(
        get_att(output),
        Some(("PayhookEventBus", "Arn")),
        "the bus is an output"
    );

    // Tables whose schema declares a stream, by logical id.
    let streamed: BTreeMap<&str, TableDef> = ALL
        .iter()
        .filter(|d| d.stream.is_some())
        .map(|d| (table_of(&t, d).0, *d))
        .collect();
    assert!(!streamed.is_empty(), "schema.rs streams no table");
    let pipes: Vec<(&String, &Value)> = t.of_type("AWS::Pipes::Pipe").collect();
    let mut types = BTreeSet::new();
    let mut sources = BTreeSet::new();
    for (name, pipe) in &pipes {
        let p = &pipe["Properties"];
        let (table, attr) = get_att(&p["Source"])
            .unwrap_or_else(|| panic!("{name}: Source is not !GetAtt <table>.StreamArn"));
        assert_eq!(attr, "StreamArn", "{name}");
        assert!(
            streamed.contains_key(table),
            "{name}: reads {table}, whose schema declares no stream"
        );
        sources.insert(table);
        assert_eq!(
            get_att(&p["Target"]),
            Some(("PayhookEventBus", "Arn")),
            "{name}: targets the bus"
        );
        let bus = &p["TargetParameters"]["EventBridgeEventBusParameters"];
        assert_eq!(bus["Source"], "payhook", "{name}");
        let detail_type = bus["DetailType"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: static DetailType"));
        assert!(detail_type.starts_with("payhook."), "{name}: {detail_type}");
        assert!(
            types.insert(detail_type.to_owned()),
            "{name}: {detail_type} twice"
        );
        let template = p["TargetParameters"]["InputTemplate"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: InputTemplate"));
        assert!(
            template.contains(&format!(r#""type": "{detail_type}""#)),
            "{name}: detail.type is the detail type"
        );
        assert!(
            template.contains(r#"{"id": ""#),
            "{name}: detail.id first, for dedup"
        );
        let filters = one_or_many(&p["SourceParameters"]["FilterCriteria"]["Filters"]);
        assert!(
            !filters.is_empty(),
            "{name}: no filter would put every stream record on the bus"
        );
        for f in filters {
            let pattern: Value = serde_json::from_str(f["Pattern"].as_str().unwrap())
                .unwrap_or_else(|e| panic!("{name}: pattern is not JSON: {e}"));
            assert!(
                pattern["eventName"].is_array(),
                "{name}: every filter names the stream event (INSERT/MODIFY)"
            );
        }
        let stream = &p["SourceParameters"]["DynamoDBStreamParameters"];
        assert!(
            stream["DeadLetterConfig"]["Arn"].is_object(),
            "{name}: undeliverable records go to a dead-letter queue"
        );
        assert!(
            stream["MaximumRetryAttempts"]
                .as_i64()
                .is_some_and(|n| n > 0),
            "{name}: bounded retries (else one bad record blocks its shard for 24 h)"
        );

        // The role: this stream, this bus, this dead-letter queue; nothing else, no wildcard.
        let (role, _) = get_att(&p["RoleArn"])
            .unwrap_or_else(|| panic!("{name}: RoleArn is not !GetAtt <role>.Arn"));
        let role = &t.resources()[role];
        assert_eq!(role["Type"], "AWS::IAM::Role", "{name}");
        let trust = &role["Properties"]["AssumeRolePolicyDocument"]["Statement"];
        assert!(
            one_or_many(trust)
                .iter()
                .all(|s| s["Principal"]["Service"] == "pipes.amazonaws.com"),
            "{name}: only Pipes assumes its role"
        );
        assert!(
            role["Properties"].get("ManagedPolicyArns").is_none(),
            "{name}: no managed policies"
        );
        let dlq = &stream["DeadLetterConfig"]["Arn"];
        for policy in one_or_many(&role["Properties"]["Policies"]) {
            for st in one_or_many(&policy["PolicyDocument"]["Statement"]) {
                assert_eq!(st["Effect"], "Allow", "{name}: {st}");
                let resources = one_or_many(&st["Resource"]);
                for action in one_or_many(&st["Action"])
                    .iter()
                    .map(|a| a.as_str().unwrap())
                {
                    assert!(!action.contains('*'), "{name}: wildcard action {action}");
                    let allowed = match action {
                        "dynamodb:DescribeStream"
                        | "dynamodb:GetRecords"
                        | "dynamodb:GetShardIterator"
                        | "dynamodb:ListStreams" => &p["Source"],
                        "events:PutEvents" => &p["Target"],
                        "sqs:SendMessage" => dlq,
                        other => panic!(
                            "{name}: its role may {other}, which a stream-to-bus pipe never needs"
                        ),
                    };
                    assert!(
                        resources.iter().all(|r| *r == allowed),
                        "{name}: {action} on {resources:?}, want only {allowed}"
                    );
                }
            }
        }
    }
    assert_eq!(
        sources,
        streamed.keys().copied().collect(),
        "every stream schema.rs declares feeds a pipe"
    );
    for required in [
        "payhook.payment.paid",
        "payhook.payment.failed",
        "payhook.refund.applied",
    ] {
        assert!(
            types.contains(required),
            "no pipe emits {required} (have {types:?})"
        );
    }
}

#[test]
fn outputs_give_a_webhook_url_per_provider() {
    let t = Template::load();
    let values: Vec<String> = t.doc["Outputs"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|o| {
            o["Value"]
                .get("Fn::Sub")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    for p in payhook::providers::ids() {
        let suffix = format!("/webhooks/{p}");
        assert!(
            values.iter().any(|v| v.ends_with(&suffix)),
            "no output with the URL for {p}"
        );
    }
    for (var, _) in env_vars().iter().filter(|(n, _)| n.ends_with("_SECRETS")) {
        // PAYHOOK_<PROVIDER>[_<VARIANT>]_SECRETS, e.g. PAYHOOK_FLUTTERWAVE_V4_SECRETS.
        let name = var
            .trim_start_matches("PAYHOOK_")
            .trim_end_matches("_SECRETS")
            .to_ascii_lowercase();
        let provider = payhook::providers::ids()
            .find(|p| name == p.as_str() || name.starts_with(&format!("{p}_")));
        assert!(provider.is_some(), "{var} names no provider");
    }
}

#[test]
fn alarms_watch_errors_throttles_and_5xx() {
    let t = Template::load();
    let alarms: Vec<&Value> = t
        .of_type("AWS::CloudWatch::Alarm")
        .map(|(_, a)| &a["Properties"])
        .collect();
    let watches = |namespace: &str, metric: &str, dim: &str, target: &str| {
        alarms.iter().any(|a| {
            a["Namespace"] == namespace
                && a["MetricName"] == metric
                && one_or_many(&a["Dimensions"])
                    .iter()
                    .any(|d| d["Name"] == dim && ref_target(&d["Value"]) == Some(target))
        })
    };
    for (name, _) in t.functions() {
        for metric in ["Errors", "Throttles"] {
            assert!(
                watches("AWS/Lambda", metric, "FunctionName", name),
                "no {metric} alarm on {name}"
            );
        }
    }
    for (api, _) in t.of_type("AWS::Serverless::HttpApi") {
        assert!(
            watches("AWS/ApiGateway", "5xx", "ApiId", api),
            "no 5xx alarm on {api}"
        );
    }
}

#[test]
fn functions_are_built_by_cargo_lambda_for_graviton() {
    let t = Template::load();
    let bins: BTreeSet<String> = std::fs::read_dir(root().join("src/bin"))
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .collect();
    for (name, f) in t.functions() {
        assert_eq!(f["Metadata"]["BuildMethod"], "rust-cargolambda", "{name}");
        let binary = f["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no BuildProperties.Binary"));
        assert!(bins.contains(binary), "{name} is built from binary {binary:?}, but there is no src/bin/{binary}.rs (have {bins:?})");
        assert_eq!(
            t.prop(f, "Runtime"),
            Some(&json!("provided.al2023")),
            "{name}"
        );
        assert_eq!(t.prop(f, "Handler"), Some(&json!("bootstrap")), "{name}");
        assert_eq!(
            t.prop(f, "Architectures"),
            Some(&json!(["arm64"])),
            "{name}"
        );
    }
}

// ------------------------------------------------------------------------------- cfn-lint

#[test]
fn cfn_lint_passes() {
    let out = Command::new("cfn-lint")
        .arg("--")
        .arg("template.yaml")
        .current_dir(root())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "cfn-lint is not on PATH: scripts/test installs it (pip install -r requirements-dev.txt); this check does not skip"
        ),
        Err(e) => panic!("running cfn-lint: {e}"),
    };
    assert!(
        out.status.success(),
        "cfn-lint template.yaml failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every IAM statement in `v` (any object with `Effect` and `Action`), wherever it sits.
fn statements(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            if m.contains_key("Effect") && m.contains_key("Action") {
                out.push(v.clone());
            }
            for child in m.values() {
                statements(child, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|c| statements(c, out)),
        _ => {}
    }
}

/// `lambda:InvokeFunction` on a payhook function is full trust: a direct invocation can hand
/// the function an API Gateway event with any IAM caller in its request context, or an
/// EventBridge event from any source (docs/deploy.md, "Who may invoke"). So the template grants
/// it to API Gateway for this stack's API (SAM scopes each route's permission to the API by
/// `SourceArn`) and to EventBridge for this stack's rule, and to nobody else.
#[test]
fn only_this_api_and_this_stack_s_rule_may_invoke_a_function() {
    let t = Template::load();
    let mut problems = Vec::new();
    for (name, p) in t.of_type("AWS::Lambda::Permission") {
        let principal = scalar(&p["Properties"]["Principal"]).unwrap_or_default();
        if !principal.ends_with(".amazonaws.com") {
            problems.push(format!(
                "{name}: principal {principal:?} is not an AWS service"
            ));
        }
        if p["Properties"].get("SourceArn").is_none() {
            problems.push(format!(
                "{name}: no SourceArn (any {principal} resource could invoke)"
            ));
        }
    }
    let mut all = Vec::new();
    statements(&Value::Object(t.resources().clone()), &mut all);
    assert!(all.len() > 10, "the walk found the template's statements");
    assert!(t.of_type("AWS::Lambda::Permission").count() > 0);
    for s in &all {
        let actions: Vec<String> = one_or_many(&s["Action"])
            .into_iter()
            .filter_map(scalar)
            .collect();
        if actions.iter().any(|a| {
            matches!(
                a.as_str(),
                "*" | "lambda:*" | "lambda:InvokeFunction" | "lambda:Invoke*"
            )
        }) {
            problems.push(format!("a policy grants {actions:?}: {s}"));
        }
    }
    for (name, f) in t.functions() {
        for (event, e) in events(f) {
            if e["Type"] == "HttpApi" && ref_target(&e["Properties"]["ApiId"]) != Some("WebhookApi")
            {
                problems.push(format!(
                    "{name}.{event}: an HttpApi event not on WebhookApi"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// IAM's wildcard match: `*` any run of characters, `?` exactly one.
fn iam_matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // matches[i][j]: p[..i] matches t[..j]
    let mut m = vec![vec![false; t.len() + 1]; p.len() + 1];
    m[0][0] = true;
    for i in 1..=p.len() {
        m[i][0] = m[i - 1][0] && p[i - 1] == '*';
        for j in 1..=t.len() {
            m[i][j] = match p[i - 1] {
                '*' => m[i - 1][j] || m[i][j - 1],
                '?' => m[i - 1][j - 1],
                c => m[i - 1][j - 1] && c == t[j - 1],
            };
        }
    }
    m[p.len()][t.len()]
}

/// The internet-facing webhook function may read signing secrets only. With the names
/// docs/deploy.md suggests (`payhook/stripe` and the key that moves money,
/// `payhook/stripe-api`), a grant of `secret:payhook/stripe-*` also matched the key's ARN
/// (`…:secret:payhook/stripe-api-AbCdEf`); a grant must match the name plus Secrets Manager's
/// six-character suffix and nothing else.
#[test]
fn no_webhook_grant_matches_a_secret_that_moves_money() {
    let t = Template::load();
    let (webhook, f) = t.webhook();
    let arn = |name: &str, suffix: &str| {
        format!("arn:aws:secretsmanager:eu-west-1:123456789012:secret:{name}-{suffix}")
    };
    let grants: Vec<String> = secret_grants(f)
        .iter()
        .map(|g| {
            let param = g
                .rsplit("${")
                .next()
                .and_then(|p| p.split('}').next())
                .unwrap_or_default();
            let name = param.trim_end_matches("SecretName").to_lowercase();
            g.replace("${AWS::Partition}", "aws")
                .replace("${AWS::Region}", "eu-west-1")
                .replace("${AWS::AccountId}", "123456789012")
                .replace(&format!("${{{param}}}"), &format!("payhook/{name}"))
        })
        .collect();
    assert!(!grants.is_empty(), "{webhook} reads signing secrets");
    let money_keys: Vec<&str> = t.doc["Parameters"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.ends_with("ApiKeySecretName"))
        .map(String::as_str)
        .collect();
    assert!(!money_keys.is_empty());
    for key in &money_keys {
        let provider = key.trim_end_matches("ApiKeySecretName").to_lowercase();
        // The suggested name, and others a reader might pick next to `payhook/{provider}`.
        for name in [
            format!("payhook/{provider}-api"),
            format!("payhook/{provider}-key"),
            format!("payhook/{provider}x"),
        ] {
            let secret = arn(&name, "AbCdEf");
            for g in &grants {
                assert!(
                    !iam_matches(g, &secret),
                    "{webhook}: {g} matches {secret}, a key that moves money"
                );
            }
        }
    }
    // AND each grant still matches its own secret, whatever its six-character suffix
    for g in &grants {
        let own = g.trim_end_matches("-??????");
        let own_name = own.rsplit("secret:").next().unwrap_or_default();
        assert!(iam_matches(g, &arn(own_name, "Q1w2E3")), "{g}");
        assert!(
            !iam_matches(g, &arn(own_name, "Q1w2E3x")),
            "{g}: longer suffix"
        );
    }
    assert!(iam_matches("a*b?", "aXXbc") && !iam_matches("a?", "abc"));
}
