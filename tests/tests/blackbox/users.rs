//! Users through the official 0.11.0 client: ids, lookup by id or name, status, permissions, renames, password changes, the server's length rules, failed-login limiting and persistence across a graceful restart.

use iggy::prelude::*;
use rill_tests::{
    ROOT_PASSWORD, ROOT_USERNAME, TestServer, connect_anonymous, connect_root, connect_user, error_code, id, named,
};
use std::collections::BTreeMap;

const RESOURCE_NOT_FOUND: u32 = 20;
const INVALID_CREDENTIALS: u32 = 42;
const INVALID_USERNAME: u32 = 43;
const INVALID_PASSWORD: u32 = 44;
const USER_ALREADY_EXISTS: u32 = 46;
const CANNOT_DELETE_USER: u32 = 48;
const CREATE_USER_CODE: u32 = 33;

/// Logs in as `username` on a fresh connection; the connection itself must succeed.
async fn login(address: &str, username: &str, password: &str) -> Result<IdentityInfo, IggyError> {
    let client = connect_anonymous(address).await.expect("connect");
    client.login_user(username, password).await
}

/// Stream 3 with manage rights on topic 1 and send rights on topic 2, plus a few globals.
fn sample_permissions() -> Permissions {
    let mut topics = BTreeMap::new();
    topics.insert(1, TopicPermissions { manage_topic: true, read_topic: true, ..TopicPermissions::default() });
    topics.insert(2, TopicPermissions { send_messages: true, ..TopicPermissions::default() });
    let mut streams = BTreeMap::new();
    streams.insert(3, StreamPermissions { read_stream: true, topics: Some(topics), ..StreamPermissions::default() });
    streams.insert(5, StreamPermissions { poll_messages: true, ..StreamPermissions::default() });
    Permissions {
        global: GlobalPermissions { read_servers: true, read_users: true, ..GlobalPermissions::default() },
        streams: Some(streams),
    }
}

/// Permissions as the server reports them, with "none" and "all false" treated alike.
fn effective(permissions: Option<Permissions>) -> Permissions {
    permissions.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_is_user_zero_and_new_users_take_the_lowest_free_id() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let root = connect_root(&server.tcp_address()).await?;

    let me = root.get_user(&id(0)).await?.expect("root user");
    assert_eq!((me.id, me.username.as_str(), me.status), (0, ROOT_USERNAME, UserStatus::Active));

    let alice = root.create_user("alice", "alice-pass", UserStatus::Active, None).await?;
    let bob = root.create_user("bob", "bob-pass", UserStatus::Active, None).await?;
    assert_eq!((alice.id, alice.username.as_str()), (1, "alice"));
    assert_eq!((bob.id, bob.username.as_str()), (2, "bob"));

    root.delete_user(&id(1)).await?;
    let carol = root.create_user("carol", "carol-pass", UserStatus::Active, None).await?;
    assert_eq!(carol.id, 1, "the freed id 1 is the lowest free one");

    let listed: Vec<(u32, String)> = root.get_users().await?.into_iter().map(|u| (u.id, u.username)).collect();
    let expected = vec![(0, ROOT_USERNAME.to_owned()), (1, "carol".to_owned()), (2, "bob".to_owned())];
    assert_eq!(listed, expected);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_found_by_id_or_name_and_missing_ones_are_none() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let root = connect_root(&server.tcp_address()).await?;
    let created = root.create_user("dave", "dave-pass", UserStatus::Active, None).await?;

    let by_id = root.get_user(&id(created.id)).await?.expect("by id");
    let by_name = root.get_user(&named("dave")).await?.expect("by name");
    assert_eq!((by_id.id, by_id.username.as_str()), (created.id, "dave"));
    assert_eq!((by_name.id, by_name.username.as_str()), (created.id, "dave"));
    let root_by_name = root.get_user(&named(ROOT_USERNAME)).await?.expect("root by name");
    assert_eq!(root_by_name.id, 0);

    assert!(root.get_user(&id(77)).await?.is_none(), "missing id");
    assert!(root.get_user(&named("ghost")).await?.is_none(), "missing name");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_user_keeps_status_and_permissions_and_permissions_can_be_replaced() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let root = connect_root(&server.tcp_address()).await?;

    let created = root.create_user("erin", "erin-pass", UserStatus::Active, Some(sample_permissions())).await?;
    assert_eq!(created.permissions, Some(sample_permissions()), "create echoes the permissions");
    let fetched = root.get_user(&named("erin")).await?.expect("erin");
    assert_eq!(fetched.permissions, Some(sample_permissions()), "get returns them");
    assert_eq!(fetched.status, UserStatus::Active);

    let sleeper = root.create_user("frank", "frank-pass", UserStatus::Inactive, None).await?;
    assert_eq!(sleeper.status, UserStatus::Inactive);
    assert_eq!(effective(sleeper.permissions), Permissions::default(), "no permissions");

    let replacement = Permissions {
        global: GlobalPermissions { manage_streams: true, send_messages: true, ..GlobalPermissions::default() },
        streams: None,
    };
    root.update_permissions(&named("erin"), Some(replacement.clone())).await?;
    let fetched = root.get_user(&named("erin")).await?.expect("erin");
    assert_eq!(fetched.permissions, Some(replacement), "replaced, not merged");

    root.update_permissions(&named("erin"), None).await?;
    let fetched = root.get_user(&named("erin")).await?.expect("erin");
    assert_eq!(effective(fetched.permissions), Permissions::default(), "cleared");

    let listed = root.get_users().await?;
    let statuses: Vec<(String, UserStatus)> = listed.into_iter().map(|u| (u.username, u.status)).collect();
    assert!(statuses.contains(&("frank".to_owned(), UserStatus::Inactive)), "{statuses:?}");
    assert!(statuses.contains(&("erin".to_owned(), UserStatus::Active)), "{statuses:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_usernames_and_deleting_root_are_refused() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let root = connect_root(&server.tcp_address()).await?;
    root.create_user("gina", "gina-pass", UserStatus::Active, None).await?;
    root.create_user("hank", "hank-pass", UserStatus::Active, None).await?;

    let duplicate = root.create_user("gina", "other-pass", UserStatus::Active, None).await;
    assert_eq!(error_code(duplicate, "create a duplicate user"), USER_ALREADY_EXISTS);
    let root_again = root.create_user(ROOT_USERNAME, "other-pass", UserStatus::Active, None).await;
    assert_eq!(error_code(root_again, "create a second iggy"), USER_ALREADY_EXISTS);
    let rename = root.update_user(&named("hank"), Some("gina"), None, &UserUpdateOptions::default()).await;
    assert_eq!(error_code(rename, "rename onto a taken name"), USER_ALREADY_EXISTS);

    let delete_root = root.delete_user(&id(0)).await;
    assert_eq!(error_code(delete_root, "delete root by id"), CANNOT_DELETE_USER);
    let delete_root = root.delete_user(&named(ROOT_USERNAME)).await;
    assert_eq!(error_code(delete_root, "delete root by name"), CANNOT_DELETE_USER);
    assert!(root.get_user(&id(0)).await?.is_some(), "root is still there");

    let missing = root.delete_user(&named("nobody")).await;
    assert_eq!(error_code(missing, "delete a missing user"), RESOURCE_NOT_FOUND);
    root.delete_user(&named("hank")).await?;
    assert!(root.get_user(&named("hank")).await?.is_none(), "deleted");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_users_log_in_by_the_new_name_and_inactive_users_cannot_log_in() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    let ivy = root.create_user("ivy", "ivy-pass", UserStatus::Active, None).await?;
    assert_eq!(login(&address, "ivy", "ivy-pass").await?.user_id, ivy.id);

    root.update_user(&id(ivy.id), Some("ivy-renamed"), None, &UserUpdateOptions::default()).await?;
    let fetched = root.get_user(&id(ivy.id)).await?.expect("renamed user");
    assert_eq!(fetched.username, "ivy-renamed");
    assert!(root.get_user(&named("ivy")).await?.is_none(), "the old name is gone");
    assert!(login(&address, "ivy", "ivy-pass").await.is_err(), "old name");
    assert_eq!(login(&address, "ivy-renamed", "ivy-pass").await?.user_id, ivy.id);

    root.update_user(&id(ivy.id), None, Some(UserStatus::Inactive), &UserUpdateOptions::default()).await?;
    let fetched = root.get_user(&id(ivy.id)).await?.expect("user");
    assert_eq!((fetched.username.as_str(), fetched.status), ("ivy-renamed", UserStatus::Inactive));
    assert!(login(&address, "ivy-renamed", "ivy-pass").await.is_err(), "inactive user logged in");

    root.update_user(&id(ivy.id), None, Some(UserStatus::Active), &UserUpdateOptions::default()).await?;
    assert_eq!(login(&address, "ivy-renamed", "ivy-pass").await?.user_id, ivy.id);

    let inactive_from_start = root.create_user("jack", "jack-pass", UserStatus::Inactive, None).await?;
    assert!(login(&address, "jack", "jack-pass").await.is_err(), "created inactive");
    root.update_user(&id(inactive_from_start.id), None, Some(UserStatus::Active), &UserUpdateOptions::default())
        .await?;
    assert_eq!(login(&address, "jack", "jack-pass").await?.user_id, inactive_from_start.id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_password_requires_the_current_password() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    let kim = root.create_user("kim", "kim-old-pass", UserStatus::Active, None).await?;

    // A user without any permission changes their own password.
    let own = connect_user(&address, "kim", "kim-old-pass").await?;
    let wrong = own.change_password(&id(kim.id), "not-my-pass", "kim-new-pass").await;
    assert_eq!(error_code(wrong, "wrong current password"), INVALID_CREDENTIALS);
    assert_eq!(login(&address, "kim", "kim-old-pass").await?.user_id, kim.id, "unchanged after a refusal");

    own.change_password(&named("kim"), "kim-old-pass", "kim-new-pass").await?;
    let old = login(&address, "kim", "kim-old-pass").await;
    assert_eq!(error_code(old, "old password after the change"), INVALID_CREDENTIALS);
    assert_eq!(login(&address, "kim", "kim-new-pass").await?.user_id, kim.id);

    // Root changes another user's password, also naming the current one.
    let wrong = root.change_password(&id(kim.id), "kim-old-pass", "kim-root-pass").await;
    assert_eq!(error_code(wrong, "root with a wrong current password"), INVALID_CREDENTIALS);
    root.change_password(&id(kim.id), "kim-new-pass", "kim-root-pass").await?;
    assert_eq!(login(&address, "kim", "kim-root-pass").await?.user_id, kim.id);

    // Root's own password.
    root.change_password(&id(0), ROOT_PASSWORD, "root-new-pass").await?;
    assert!(login(&address, ROOT_USERNAME, ROOT_PASSWORD).await.is_err(), "old root password");
    assert_eq!(login(&address, ROOT_USERNAME, "root-new-pass").await?.user_id, 0);
    Ok(())
}

/// A CREATE_USER body as the 0.11 client encodes it (active, no permissions, no options),
/// built by hand so lengths the client refuses locally still reach the server.
fn create_user_body(username: &str, password: &str) -> Vec<u8> {
    let mut body = vec![username.len() as u8];
    body.extend_from_slice(username.as_bytes());
    body.push(password.len() as u8);
    body.extend_from_slice(password.as_bytes());
    body.extend_from_slice(&[1, 0]);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn username_and_password_lengths_are_enforced_by_the_server() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;

    let cases = [
        ("ab", "good-pass", INVALID_USERNAME),
        (&"u".repeat(51), "good-pass", INVALID_USERNAME),
        ("good-name", "pw", INVALID_PASSWORD),
        ("good-name", &"p".repeat(101), INVALID_PASSWORD),
    ];
    for (username, password, expected) in cases {
        let body = create_user_body(username, password);
        let result = root.send_binary_request(CREATE_USER_CODE, body.into()).await;
        let what = format!("username of {} bytes, password of {} bytes", username.len(), password.len());
        assert_eq!(error_code(result, &what), expected, "{what}");
    }
    let names: Vec<String> = root.get_users().await?.into_iter().map(|u| u.username).collect();
    assert_eq!(names, vec![ROOT_USERNAME.to_owned()], "nothing was created");

    // The bounds themselves are accepted, and such users log in.
    let shortest = root.create_user("abc", "xyz", UserStatus::Active, None).await?;
    let long_name = "n".repeat(50);
    let long_password = "p".repeat(100);
    let longest = root.create_user(&long_name, &long_password, UserStatus::Active, None).await?;
    assert_eq!(login(&address, "abc", "xyz").await?.user_id, shortest.id);
    assert_eq!(login(&address, &long_name, &long_password).await?.user_id, longest.id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_failed_logins_lock_the_user_even_with_the_right_password() -> anyhow::Result<()> {
    let env = [("IGGY_LOGIN_MAX_FAILURES", "3"), ("IGGY_LOGIN_FAILURE_WINDOW", "5 m")];
    let server = TestServer::start_with_env(&env)?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    root.create_user("locked", "locked-pass", UserStatus::Active, None).await?;
    root.create_user("careful", "careful-pass", UserStatus::Active, None).await?;

    // Below the limit the right password still works.
    for attempt in 0..2 {
        let result = login(&address, "careful", "wrong-pass").await;
        assert_eq!(error_code(result, &format!("careful: wrong password {attempt}")), INVALID_CREDENTIALS);
    }
    login(&address, "careful", "careful-pass").await?;

    // Past it the user is refused whatever the password.
    for attempt in 0..4 {
        let result = login(&address, "locked", "wrong-pass").await;
        assert!(result.is_err(), "locked: wrong password {attempt} was accepted");
    }
    let right = login(&address, "locked", "locked-pass").await;
    assert!(right.is_err(), "a locked user logged in with the right password: {right:?}");
    let right_again = login(&address, "locked", "locked-pass").await;
    assert!(right_again.is_err(), "the lock held only once: {right_again:?}");

    // The lock is per user.
    login(&address, ROOT_USERNAME, ROOT_PASSWORD).await?;
    login(&address, "careful", "careful-pass").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_failed_login_limit_is_ten() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let root = connect_root(&address).await?;
    root.create_user("nine", "nine-pass", UserStatus::Active, None).await?;
    root.create_user("eleven", "eleven-pass", UserStatus::Active, None).await?;

    for _ in 0..9 {
        assert!(login(&address, "nine", "wrong-pass").await.is_err());
    }
    login(&address, "nine", "nine-pass").await?;

    for _ in 0..11 {
        assert!(login(&address, "eleven", "wrong-pass").await.is_err());
    }
    let right = login(&address, "eleven", "eleven-pass").await;
    assert!(right.is_err(), "eleven failures did not lock the user: {right:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_statuses_permissions_and_passwords_survive_a_graceful_restart() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let address = server.tcp_address();
    {
        let root = connect_root(&address).await?;
        root.create_user("lena", "lena-pass", UserStatus::Active, Some(sample_permissions())).await?;
        root.create_user("moe", "moe-pass", UserStatus::Inactive, None).await?;
        root.create_user("nia", "nia-pass", UserStatus::Active, None).await?;
        root.change_password(&named("nia"), "nia-pass", "nia-changed").await?;
        root.delete_user(&named("moe")).await?;
        root.create_user("otto", "otto-pass", UserStatus::Inactive, None).await?;
    }
    server.restart()?;

    let root = connect_root(&address).await?;
    let users: Vec<(u32, String, UserStatus)> =
        root.get_users().await?.into_iter().map(|u| (u.id, u.username, u.status)).collect();
    let expected = vec![
        (0, ROOT_USERNAME.to_owned(), UserStatus::Active),
        (1, "lena".to_owned(), UserStatus::Active),
        (2, "otto".to_owned(), UserStatus::Inactive),
        (3, "nia".to_owned(), UserStatus::Active),
    ];
    assert_eq!(users, expected, "ids, names and statuses after the restart");
    let lena = root.get_user(&named("lena")).await?.expect("lena");
    assert_eq!(lena.permissions, Some(sample_permissions()));

    assert_eq!(login(&address, "lena", "lena-pass").await?.user_id, 1);
    assert_eq!(login(&address, "nia", "nia-changed").await?.user_id, 3);
    assert!(login(&address, "nia", "nia-pass").await.is_err(), "old password after restart");
    assert!(login(&address, "otto", "otto-pass").await.is_err(), "inactive after restart");
    let next = root.create_user("pia", "pia-pass", UserStatus::Active, None).await?;
    assert_eq!(next.id, 4, "ids continue after the restart");
    Ok(())
}
