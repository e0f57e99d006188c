//! Personal access tokens through the official 0.11.0 client: create, list, delete, login with a token, expiry and the cleaner, per-user limits, persistence, and that neither passwords nor raw tokens ever reach the data directory or the logs.

use iggy::prelude::*;
use rill_tests::{
    TestServer, connect_anonymous, connect_root, connect_user, contains_bytes, error_code, eventually, files_under, id,
    named,
};
use std::time::Duration;

const UNAUTHENTICATED: u32 = 40;
const UNAUTHORIZED: u32 = 41;
const TOKEN_ALREADY_EXISTS: u32 = 51;
const TOKENS_LIMIT_REACHED: u32 = 52;
const INVALID_TOKEN: u32 = 53;
const TOKEN_EXPIRED: u32 = 54;
const HOUR_US: u64 = 3_600_000_000;
/// Slack for comparing the server's clock with this process's.
const CLOCK_SLACK_US: u64 = 5_000_000;

/// Logs in with `token` on a fresh connection; the connection itself must succeed.
async fn login_with_token(address: &str, token: &str) -> Result<IdentityInfo, IggyError> {
    let client = connect_anonymous(address).await.expect("connect");
    client.login_with_personal_access_token(token).await
}

/// Panics unless logging in with `token` is refused as an invalid or expired token.
async fn assert_token_refused(address: &str, token: &str, what: &str) {
    let code = error_code(login_with_token(address, token).await, what);
    assert!(code == INVALID_TOKEN || code == TOKEN_EXPIRED, "{what}: error {code}, expected 53 or 54");
}

/// The names of the caller's tokens with their expiry in µs (`None` = never), sorted.
async fn listed(client: &IggyClient) -> anyhow::Result<Vec<(String, Option<u64>)>> {
    let mut tokens: Vec<(String, Option<u64>)> = client
        .get_personal_access_tokens()
        .await?
        .into_iter()
        .map(|t| (t.name, t.expiry_at.map(|at| at.as_micros())))
        .collect();
    tokens.sort();
    Ok(tokens)
}

fn now_us() -> u64 {
    IggyTimestamp::now().as_micros()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_listed_with_their_expiry_and_log_the_owner_in() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    let owner = root.create_user("pat-owner", "owner-pass", UserStatus::Active, None).await?;
    let client = connect_user(&address, "pat-owner", "owner-pass").await?;

    let never = client.create_personal_access_token("never", IggyExpiry::NeverExpire).await?;
    let default = client.create_personal_access_token("default", IggyExpiry::ServerDefault).await?;
    let before = now_us();
    let hour = IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_secs(3600)));
    let hourly = client.create_personal_access_token("hourly", hour).await?;
    let after = now_us();

    let raw = [&never.token, &default.token, &hourly.token];
    assert!(raw.iter().all(|t| !t.is_empty()), "raw tokens are returned");
    assert!(raw[0] != raw[1] && raw[1] != raw[2] && raw[0] != raw[2], "tokens are unique");

    let tokens = listed(&client).await?;
    let names: Vec<&str> = tokens.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, vec!["default", "hourly", "never"]);
    assert_eq!(tokens[0].1, None, "the server default is never");
    assert_eq!(tokens[2].1, None, "never expires");
    let expiry = tokens[1].1.expect("the hourly token expires");
    assert!(
        expiry + CLOCK_SLACK_US >= before + HOUR_US && expiry <= after + HOUR_US + CLOCK_SLACK_US,
        "expiry {expiry} is not an hour after creation ({before}..{after})"
    );

    for token in raw {
        let identity = login_with_token(&address, token).await?;
        assert_eq!(identity.user_id, owner.id, "a token logs its owner in");
    }
    let via_token = connect_anonymous(&address).await?;
    via_token.login_with_personal_access_token(&never.token).await?;
    assert_eq!(via_token.get_me().await?.user_id, Some(owner.id));
    assert_eq!(listed(&via_token).await?.len(), 3, "a token session sees its owner's tokens");

    assert!(listed(&root).await?.is_empty(), "root sees only its own tokens");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_unique_per_user_and_deleted_tokens_cannot_log_in() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    root.create_user("first", "first-pass", UserStatus::Active, None).await?;
    root.create_user("second", "second-pass", UserStatus::Active, None).await?;
    let first = connect_user(&address, "first", "first-pass").await?;
    let second = connect_user(&address, "second", "second-pass").await?;

    let kept = first.create_personal_access_token("ci-bot", IggyExpiry::NeverExpire).await?;
    let duplicate = first.create_personal_access_token("ci-bot", IggyExpiry::NeverExpire).await;
    assert_eq!(error_code(duplicate, "duplicate name"), TOKEN_ALREADY_EXISTS);
    let other = second.create_personal_access_token("ci-bot", IggyExpiry::NeverExpire).await?;
    assert_ne!(kept.token, other.token);

    let doomed = first.create_personal_access_token("doomed", IggyExpiry::NeverExpire).await?;
    login_with_token(&address, &doomed.token).await?;
    first.delete_personal_access_token("doomed").await?;
    assert_eq!(listed(&first).await?, vec![("ci-bot".to_owned(), None)]);
    assert_token_refused(&address, &doomed.token, "deleted token").await;
    assert!(first.delete_personal_access_token("doomed").await.is_err(), "deleting twice");

    // Deleting by name touches only the caller's own tokens: "ci-bot" of `second` stays.
    first.delete_personal_access_token("ci-bot").await?;
    assert!(listed(&first).await?.is_empty());
    assert_eq!(listed(&second).await?, vec![("ci-bot".to_owned(), None)]);
    login_with_token(&address, &other.token).await?;
    assert_token_refused(&address, &kept.token, "deleted ci of first").await;

    assert_token_refused(&address, "not-a-token-at-all", "made-up token").await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_holds_at_most_one_hundred_tokens() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let root = connect_root(&server.tcp_address()).await?;
    for n in 0..100 {
        root.create_personal_access_token(&format!("token-{n:03}"), IggyExpiry::NeverExpire).await?;
    }
    let extra = root.create_personal_access_token("token-100", IggyExpiry::NeverExpire).await;
    assert_eq!(error_code(extra, "the 101st token"), TOKENS_LIMIT_REACHED);
    assert_eq!(listed(&root).await?.len(), 100);

    root.delete_personal_access_token("token-042").await?;
    root.create_personal_access_token("token-100", IggyExpiry::NeverExpire).await?;
    assert_eq!(listed(&root).await?.len(), 100, "a freed slot can be used again");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_tokens_cannot_log_in() -> anyhow::Result<()> {
    // The default cleaner interval (1 minute) leaves the token in place; it is refused anyway.
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    let short = IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_secs(2)));
    let token = root.create_personal_access_token("short", short).await?;
    let expiry = listed(&root).await?[0].1.expect("the token expires");

    let remaining = expiry.saturating_sub(now_us()) + 500_000;
    tokio::time::sleep(Duration::from_micros(remaining)).await;
    assert_token_refused(&address, &token.token, "expired token").await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_removes_expired_tokens_only() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[("IGGY_PERSONAL_ACCESS_TOKEN_CLEANER_INTERVAL", "1s")])?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    let short = IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_secs(2)));
    let expiring = root.create_personal_access_token("expiring", short).await?;
    let lasting = root.create_personal_access_token("lasting", IggyExpiry::NeverExpire).await?;
    let hour = IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_secs(3600)));
    root.create_personal_access_token("hourly", hour).await?;

    eventually(Duration::from_secs(30), "the expired token leaves the list", || async {
        Ok(!listed(&root).await?.iter().any(|(name, _)| name == "expiring"))
    })
    .await?;
    let names: Vec<String> = listed(&root).await?.into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, vec!["hourly".to_owned(), "lasting".to_owned()]);
    assert_token_refused(&address, &expiring.token, "cleaned token").await;
    assert_eq!(login_with_token(&address, &lasting.token).await?.user_id, 0);

    // The name is free again.
    root.create_personal_access_token("expiring", IggyExpiry::NeverExpire).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_without_permissions_manage_their_own_tokens() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    let plain = root.create_user("plain", "plain-pass", UserStatus::Active, None).await?;
    let client = connect_user(&address, "plain", "plain-pass").await?;

    let token = client.create_personal_access_token("mine", IggyExpiry::NeverExpire).await?;
    assert_eq!(listed(&client).await?, vec![("mine".to_owned(), None)]);
    let via_token = connect_anonymous(&address).await?;
    via_token.login_with_personal_access_token(&token.token).await?;
    // The token carries the owner's (absent) permissions, nothing more.
    let denied = via_token.get_streams().await;
    assert_eq!(error_code(denied, "get_streams with a token of a user without permissions"), UNAUTHORIZED);
    client.delete_personal_access_token("mine").await?;
    assert!(listed(&client).await?.is_empty());

    // Before login the token commands are refused.
    let anonymous = connect_anonymous(&address).await?;
    let list = anonymous.send_binary_request(41, Vec::new().into()).await;
    assert_eq!(error_code(list, "list tokens before login"), UNAUTHENTICATED);

    // A deactivated user's token stops working, and works again once reactivated.
    let token = client.create_personal_access_token("again", IggyExpiry::NeverExpire).await?;
    root.update_user(&id(plain.id), None, Some(UserStatus::Inactive), &UserUpdateOptions::default()).await?;
    assert!(login_with_token(&address, &token.token).await.is_err(), "inactive user's token");
    root.update_user(&id(plain.id), None, Some(UserStatus::Active), &UserUpdateOptions::default()).await?;
    assert_eq!(login_with_token(&address, &token.token).await?.user_id, plain.id);

    // Deleting the user invalidates the token.
    root.delete_user(&named("plain")).await?;
    assert!(login_with_token(&address, &token.token).await.is_err(), "deleted user's token");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_survive_a_graceful_restart() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let address = server.tcp_address();
    let (owner, never, hourly, list_before, gone) = {
        let root = connect_root(&address).await?;
        let owner = root.create_user("keeper", "keeper-pass", UserStatus::Active, None).await?;
        let client = connect_user(&address, "keeper", "keeper-pass").await?;
        let never = client.create_personal_access_token("never", IggyExpiry::NeverExpire).await?;
        let hour = IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_secs(3600)));
        let hourly = client.create_personal_access_token("hourly", hour).await?;
        let gone = client.create_personal_access_token("gone", IggyExpiry::NeverExpire).await?;
        client.delete_personal_access_token("gone").await?;
        (owner, never, hourly, listed(&client).await?, gone)
    };
    server.restart()?;

    assert_eq!(login_with_token(&address, &never.token).await?.user_id, owner.id);
    assert_eq!(login_with_token(&address, &hourly.token).await?.user_id, owner.id);
    assert_token_refused(&address, &gone.token, "a token deleted before the restart").await;
    let client = connect_user(&address, "keeper", "keeper-pass").await?;
    assert_eq!(listed(&client).await?, list_before, "names and expiry after the restart");
    let duplicate = client.create_personal_access_token("never", IggyExpiry::NeverExpire).await;
    assert_eq!(error_code(duplicate, "duplicate after restart"), TOKEN_ALREADY_EXISTS);
    Ok(())
}

/// Every secret must stay out of every file of the server (data directory, logs) and out
/// of what it printed.
fn assert_secrets_absent(server: &TestServer, secrets: &[&str]) -> anyhow::Result<()> {
    let data_files = files_under(&server.data_dir());
    assert!(!data_files.is_empty(), "the data directory holds files");
    let anything_named =
        data_files.iter().any(|path| std::fs::read(path).is_ok_and(|bytes| contains_bytes(&bytes, b"vault-keeper")));
    assert!(anything_named, "the username is stored somewhere, so the scan reads the real metadata");

    let root_dir = server.data_dir().parent().expect("test root").to_path_buf();
    let logs = server.logs();
    for path in files_under(&root_dir) {
        let bytes = std::fs::read(&path)?;
        for secret in secrets {
            assert!(!contains_bytes(&bytes, secret.as_bytes()), "{} contains the secret {secret:?}", path.display());
        }
    }
    for secret in secrets {
        assert!(!logs.contains(secret), "the server output contains the secret {secret:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_and_raw_tokens_never_reach_disk_or_logs() -> anyhow::Result<()> {
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_LOGGING_LEVEL", "trace")])?;
    let address = server.tcp_address();
    let first_password = "Vault-Pass-7f3c9e21d4";
    let second_password = "Vault-Pass-0a8b6c44e1";
    let other_password = "Vault-Pass-c1d2e3f4a5";
    let wrong_password = "Vault-Pass-5d2e7f90ab";
    let mut tokens = Vec::new();
    {
        let root = connect_root(&address).await?;
        root.create_user("vault-keeper", first_password, UserStatus::Active, None).await?;
        root.create_user("vault-other", other_password, UserStatus::Inactive, None).await?;
        let failed = connect_anonymous(&address).await?.login_user("vault-keeper", wrong_password).await;
        assert!(failed.is_err(), "wrong password accepted");
        let keeper = connect_user(&address, "vault-keeper", first_password).await?;
        keeper.change_password(&named("vault-keeper"), first_password, second_password).await?;
        for name in ["vault-a", "vault-b", "vault-c"] {
            tokens.push(keeper.create_personal_access_token(name, IggyExpiry::NeverExpire).await?.token);
        }
        keeper.delete_personal_access_token("vault-b").await?;
        login_with_token(&address, &tokens[0]).await?;
    }
    server.restart()?;
    connect_user(&address, "vault-keeper", second_password).await?;
    login_with_token(&address, &tokens[2]).await?;
    server.stop_graceful()?;

    let mut secrets = vec![first_password, second_password, other_password, wrong_password];
    secrets.extend(tokens.iter().map(String::as_str));
    assert_secrets_absent(&server, &secrets)
}
