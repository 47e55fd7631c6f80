//! Payout keys that no configuration change re-scopes (issue #42, case 3), through the real
//! binary: `payhook serve` against dynalite and the fake transfer API. A payout id is derived
//! from the caller's scope, which is recorded per token at the first start that sees it; each
//! test changes the configuration the way docs/payouts.md's callers table documents, retries
//! the same token and `Idempotency-Key`, and counts what matters: the payout named, transfer
//! POSTs, and the balance. The changes that would re-scope keys are refused at start, with the
//! declaration that resolves them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::common::transfer_api::{Behaviour, Shared, PATIENT};
use crate::common::*;
use crate::payout_providers::{
    balance, fake_provider, free_port, fund, generic_word, pay_with, serve, serve_command,
    total_posts, Answer, Serve, Timing, OTHER_TOKEN, TOKEN,
};
use payhook::dynamodb::DynamoStore;

const THIRD: &str = "payout-token-for-the-caller-tests-000003";

const TIMING: Timing = Timing {
    lease_ms: 30_000,
    bound_ms: 1_000,
    // Long: no resend can happen inside a test, so every POST counted is a payout's first.
    visibility_ms: 120_000,
};

/// Answers after payhook gave up (the send is ambiguous: `202 sent`), then has the transfer.
const LATE: Behaviour = Behaviour {
    hold_ms: 2_500,
    commits_after_answering: true,
    ..PATIENT
};

fn id_of(token: &str) -> String {
    payhook::http::ReadToken::new(token).unwrap().id()
}

async fn pay(s: &Serve, token: &str, key: &str, amount: i64) -> Answer {
    pay_with(s, token, key, "wallet_c", amount)
        .await
        .expect("payhook serve answered")
}

async fn setup(name: &str, behaviour: Behaviour) -> (DynamoStore, String, Shared) {
    let store = store(name).await;
    let (url, fake) = fake_provider(behaviour, TIMING).await;
    fund(&app(store.clone(), 30_000), "wallet_c", 10_000).await;
    (store, url, fake)
}

/// Runs `payhook serve` expecting it to refuse to start: its exit status and stderr.
async fn refused(store: &DynamoStore, url: &str, extra: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = serve_command(store, url, TIMING, extra, free_port());
    let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("payhook serve started where it must refuse: {extra:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (status.success(), err)
}

fn no_token_values(stderr: &str) {
    for t in [TOKEN, OTHER_TOKEN, THIRD] {
        assert!(!stderr.contains(t), "a token's value was printed: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_to_named_caller_keeps_a_paid_and_a_sent_payout() {
    let (store, url, fake) = setup("pc_migrate", LATE).await;
    // GIVEN two payouts made under PAYHOOK_PAYOUT_TOKEN: one the provider then paid, one still
    // `202 sent` (its POST outlived the call's bound)
    let old = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_TOKEN", TOKEN)]).await;
    let paid = pay(&old, TOKEN, "mig-paid", 600).await;
    let sent = pay(&old, TOKEN, "mig-sent", 300).await;
    assert_eq!((paid.status, sent.status), (202, 202), "{paid:?} {sent:?}");
    let word = generic_word(&old, "transfer.succeeded", &paid.payout(), 600, 1).await;
    assert_eq!(word.status, 200);
    assert_eq!(total_posts(&fake), 2);
    drop(old);
    // WHEN the token moves to a named caller, as docs/payouts.md suggests for a second system
    let callers = format!("erp={TOKEN}");
    let s = serve(
        &store,
        &url,
        TIMING,
        &[("PAYHOOK_PAYOUT_CALLERS", &callers)],
    )
    .await;
    let paid_again = pay(&s, TOKEN, "mig-paid", 600).await;
    let sent_again = pay(&s, TOKEN, "mig-sent", 300).await;
    // THEN each retry names its payout: replayed, nothing reserved or sent again
    assert_eq!(
        (paid_again.payout(), paid_again.replayed),
        (paid.payout(), true)
    );
    assert_eq!(paid_again.payout_status.as_deref(), Some("paid"));
    assert_eq!(
        (sent_again.payout(), sent_again.replayed),
        (sent.payout(), true)
    );
    assert_eq!(total_posts(&fake), 2);
    assert_eq!(balance(&store, "wallet_c").await, 10_000 - 600 - 300);
    // AND back to PAYHOOK_PAYOUT_TOKEN: still the same payouts
    drop(s);
    let back = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_TOKEN", TOKEN)]).await;
    assert_eq!(
        pay(&back, TOKEN, "mig-paid", 600).await.payout(),
        paid.payout()
    );
    assert_eq!(total_posts(&fake), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_through_named_callers_keeps_the_payout() {
    let (store, url, fake) = setup("pc_rotate", PATIENT).await;
    // GIVEN a payout made with t1 under PAYHOOK_PAYOUT_TOKEN
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_TOKEN", TOKEN)]).await;
    let first = pay(&s, TOKEN, "rot-1", 500).await;
    assert_eq!((first.status, first.replayed), (201, false));
    drop(s);
    // WHEN t2 joins t1 (overlap) under a named caller, then t1 is dropped
    let both = format!("erp={TOKEN},{OTHER_TOKEN}");
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_CALLERS", &both)]).await;
    let overlap = pay(&s, OTHER_TOKEN, "rot-1", 500).await;
    drop(s);
    let only = format!("erp={OTHER_TOKEN}");
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_CALLERS", &only)]).await;
    assert_eq!(pay(&s, TOKEN, "rot-1", 500).await.status, 403);
    let retry = pay(&s, OTHER_TOKEN, "rot-1", 500).await;
    // THEN t2 names the payout t1 made: one transfer, debited once
    assert_eq!((overlap.payout(), overlap.replayed), (first.payout(), true));
    assert_eq!((retry.payout(), retry.replayed), (first.payout(), true));
    assert_eq!(total_posts(&fake), 1);
    assert_eq!(balance(&store, "wallet_c").await, 9_500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_without_overlap_after_the_move_keeps_the_payout() {
    let (store, url, fake) = setup("pc_rotate_gap", PATIENT).await;
    // GIVEN a payout made with t1 under PAYHOOK_PAYOUT_TOKEN, then t1 moved to erp
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_TOKEN", TOKEN)]).await;
    let first = pay(&s, TOKEN, "gap-1", 500).await;
    drop(s);
    let erp = format!("erp={TOKEN}");
    drop(serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_CALLERS", &erp)]).await);
    // WHEN t1 is replaced by t2 in one step (no overlap)
    let only = format!("erp={OTHER_TOKEN}");
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_CALLERS", &only)]).await;
    let retry = pay(&s, OTHER_TOKEN, "gap-1", 500).await;
    // THEN erp's recorded name keeps the scope: the same payout, one transfer
    assert_eq!((retry.payout(), retry.replayed), (first.payout(), true));
    assert_eq!(total_posts(&fake), 1);
    assert_eq!(balance(&store, "wallet_c").await, 9_500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_caller_keeps_its_payouts() {
    let (store, url, fake) = setup("pc_rename", PATIENT).await;
    let erp = format!("erp={TOKEN}");
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_CALLERS", &erp)]).await;
    let first = pay(&s, TOKEN, "ren-1", 400).await;
    assert_eq!((first.status, first.replayed), (201, false));
    drop(s);
    // WHEN erp is renamed finance, with the same token
    let finance = format!("finance={TOKEN}");
    let s = serve(
        &store,
        &url,
        TIMING,
        &[("PAYHOOK_PAYOUT_CALLERS", &finance)],
    )
    .await;
    let retry = pay(&s, TOKEN, "ren-1", 400).await;
    // THEN the same payout
    assert_eq!((retry.payout(), retry.replayed), (first.payout(), true));
    assert_eq!(total_posts(&fake), 1);
    assert_eq!(balance(&store, "wallet_c").await, 9_600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_is_refused_until_declared_and_the_declaration_keeps_both_payouts() {
    let (store, url, fake) = setup("pc_merge", PATIENT).await;
    // GIVEN two callers' payouts under the same key: local (t1) and shop (t3)
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_TOKEN", TOKEN)]).await;
    let local = pay(&s, TOKEN, "merge-1", 100).await;
    drop(s);
    let shop = format!("shop={THIRD}");
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_CALLERS", &shop)]).await;
    let shops = pay(&s, THIRD, "merge-1", 200).await;
    drop(s);
    assert_ne!(local.payout(), shops.payout());
    // WHEN both tokens are listed as one caller
    let merged = format!("erp={TOKEN},{THIRD}");
    let (ok, stderr) = refused(&store, &url, &[("PAYHOOK_PAYOUT_CALLERS", &merged)]).await;
    // THEN serve refuses, naming the tokens by id, the scopes and the declaration to write
    assert!(!ok, "{stderr}");
    for part in [
        format!("token {} -> caller:local", id_of(TOKEN)),
        format!("token {} -> caller:shop", id_of(THIRD)),
        "`erp@caller:local=`".to_owned(),
    ] {
        assert!(stderr.contains(&part), "{part} not in {stderr}");
    }
    no_token_values(&stderr);
    // WHEN the operator declares it
    let declared = format!("erp@caller:local={TOKEN},{THIRD}");
    let s = serve(
        &store,
        &url,
        TIMING,
        &[("PAYHOOK_PAYOUT_CALLERS", &declared)],
    )
    .await;
    // THEN each token's retry names the payout it made; nothing is sent again
    let a = pay(&s, TOKEN, "merge-1", 100).await;
    let b = pay(&s, THIRD, "merge-1", 200).await;
    assert_eq!((a.payout(), a.replayed), (local.payout(), true));
    assert_eq!((b.payout(), b.replayed), (shops.payout(), true));
    assert_eq!(total_posts(&fake), 2);
    assert_eq!(balance(&store, "wallet_c").await, 9_700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_is_refused_until_declared_and_the_declaration_keeps_the_old_payouts() {
    let (store, url, fake) = setup("pc_split", PATIENT).await;
    // GIVEN a payout of local, whose two tokens (a rotation) are bound to caller:local
    let both = format!("{TOKEN} {OTHER_TOKEN}");
    let s = serve(&store, &url, TIMING, &[("PAYHOOK_PAYOUT_TOKEN", &both)]).await;
    let old = pay(&s, TOKEN, "split-1", 100).await;
    drop(s);
    // WHEN the two tokens become two callers
    let split = format!("erp={TOKEN} shop={OTHER_TOKEN}");
    let (ok, stderr) = refused(&store, &url, &[("PAYHOOK_PAYOUT_CALLERS", &split)]).await;
    // THEN serve refuses (either could replay the other's payouts), saying what to declare
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("caller:local"), "{stderr}");
    assert!(stderr.contains("`shop@caller:shop=`"), "{stderr}");
    assert!(stderr.contains(&id_of(OTHER_TOKEN)), "{stderr}");
    no_token_values(&stderr);
    // WHEN shop is declared a scope of its own
    let declared = format!("erp={TOKEN} shop@caller:shop={OTHER_TOKEN}");
    let s = serve(
        &store,
        &url,
        TIMING,
        &[("PAYHOOK_PAYOUT_CALLERS", &declared)],
    )
    .await;
    // THEN erp's retry names the old payout, and shop's same key is a payout of its own
    let erp = pay(&s, TOKEN, "split-1", 100).await;
    let shop = pay(&s, OTHER_TOKEN, "split-1", 100).await;
    assert_eq!((erp.payout(), erp.replayed), (old.payout(), true));
    assert_ne!(shop.payout(), old.payout());
    assert!(!shop.replayed);
    assert_eq!(total_posts(&fake), 2);
    assert_eq!(balance(&store, "wallet_c").await, 9_800);
}

#[tokio::test]
async fn a_binding_is_written_once_and_a_second_write_reads_the_first() {
    use payhook::payouts::callers::{Holder, Scope, Scopes, TokenId};
    let store = store("pc_bind").await;
    let (a, b) = (TokenId(id_of(TOKEN)), TokenId(id_of(OTHER_TOKEN)));
    let (erp, shop) = (Scope::of_name("erp"), Scope::of_name("shop"));
    // GIVEN a bound to erp
    assert_eq!(
        store.bind_scope(Holder::Token(&a), &erp).await.unwrap(),
        None
    );
    // WHEN another start binds it to shop, or to erp again
    // THEN the first binding stands and is what the loser reads
    assert_eq!(
        store.bind_scope(Holder::Token(&a), &shop).await.unwrap(),
        Some(erp.clone())
    );
    assert_eq!(
        store.bind_scope(Holder::Token(&a), &erp).await.unwrap(),
        None
    );
    assert_eq!(
        store.bind_scope(Holder::Name("erp"), &shop).await.unwrap(),
        None
    );
    let names = ["erp".to_owned(), "other".to_owned()];
    let bound = store
        .bound_scopes(&[a.clone(), b.clone(), a.clone()], &names)
        .await
        .unwrap();
    assert_eq!(bound.tokens.len(), 1);
    assert_eq!(bound.tokens[&a], erp);
    assert_eq!(bound.names.len(), 1);
    assert_eq!(bound.names["erp"], shop);
}
