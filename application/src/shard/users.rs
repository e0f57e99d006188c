//! Users, personal access tokens and login. Secrets are hashed through the `Offload` port
//! (Argon2id off the event loop) before any operation is journaled.

use rill_domain::answer::{Answer, TokenInfo, UserDetails, UserInfo};
use rill_domain::error::ErrorCode;
use rill_domain::identifier::Identifier;
use rill_domain::permissions::{Access, Permissions};
use rill_domain::wire::command::{Credentials, MetadataOp};

use super::Shard;
use crate::credentials::{generate_token, hash_password, hash_token, verify_password};
use crate::login;
use crate::ports::{Env, MetadataRead, Offload, ShardReply};

/// A token expiry of u64::MAX never expires; 0 asks for the server default (never).
fn token_expiry_at(expiry_us: u64, now_us: u64) -> u64 {
    match expiry_us {
        0 | u64::MAX => 0,
        relative => now_us.saturating_add(relative),
    }
}

impl<E: Env> Shard<E> {
    async fn hash(&self, secret: &str) -> String {
        let secret = secret.to_owned();
        self.offload.run(move || hash_password(&secret)).await
    }

    async fn verify(&self, hash: &str, secret: &str) -> bool {
        let (hash, secret) = (hash.to_owned(), secret.to_owned());
        self.offload.run(move || verify_password(&hash, &secret)).await
    }

    /// Commits a journal-only operation through shard 0.
    async fn commit_internal(&self, op: &MetadataOp<'_>) -> ShardReply {
        let (operation, body) = op.encode_internal().expect("a journal-only operation");
        self.execute_metadata(operation, &body, op).await
    }

    /// Checks credentials; returns the user id. Every failed password costs one hash and
    /// the failure delay, off the event loop.
    pub(crate) async fn authenticate(&self, credentials: &Credentials) -> Result<u32, ErrorCode> {
        match credentials {
            Credentials::Password { username, password } => {
                let check = self.metadata.read(|m| login::password_check(m, username));
                let (hash, password) = (check.hash.clone(), password.clone());
                let delay = std::time::Duration::from_micros(self.shared.config.security.login_failure_delay_us);
                let verified = self.offload.run(move || login::verify_slowly(&hash, &password, delay)).await;
                login::conclude(&self.shared.sessions.login_guard, username, &check, verified, self.now_us())
            }
            Credentials::Token(token) => self.metadata.read(|m| login::token_user(m, token, self.now_us())),
        }
    }

    /// Whether `user_id` holds `access`; an unknown or inactive user holds nothing.
    pub(crate) fn authorize(&self, user_id: u32, access: Access) -> Result<(), ErrorCode> {
        if self.metadata.read(|m| m.user_allows(user_id, access)) { Ok(()) } else { Err(ErrorCode::Unauthorized) }
    }

    pub async fn create_user(
        &self,
        username: &str,
        password: &str,
        status: u8,
        permissions: Option<Permissions>,
    ) -> ShardReply {
        if !(3..=100).contains(&password.len()) {
            return Err(ErrorCode::InvalidPassword);
        }
        let password_hash = self.hash(password).await;
        let op = MetadataOp::InsertUser { username: username.to_owned(), password_hash, status, permissions };
        self.commit_internal(&op).await
    }

    /// Changes a password after checking the current one. Users change their own;
    /// changing someone else's needs manage_users.
    pub async fn change_password(&self, caller: u32, user: &Identifier, current: &str, new: &str) -> ShardReply {
        let target = self
            .metadata
            .read(|m| m.user_id(user).map(|id| (id, m.user(id).map(|u| u.password_hash.clone()).unwrap_or_default())));
        let (user_id, hash) = target?;
        if user_id != caller {
            self.authorize(caller, Access::ManageUsers)?;
        }
        if !(3..=100).contains(&new.len()) {
            return Err(ErrorCode::InvalidPassword);
        }
        if !self.verify(&hash, current).await {
            return Err(ErrorCode::InvalidCredentials);
        }
        let password_hash = self.hash(new).await;
        self.commit_internal(&MetadataOp::SetPassword { user_id, password_hash }).await
    }

    pub fn get_user(&self, user: &Identifier) -> Answer {
        Answer::User(self.metadata.read(|m| m.user_id(user).ok().and_then(|id| m.user(id)).map(UserDetails::of)))
    }

    pub fn get_users(&self) -> Answer {
        Answer::Users(self.metadata.read(|m| m.users().map(UserInfo::of).collect()))
    }

    /// Creates a token for the caller; the raw token is returned once and never stored.
    pub async fn create_token(&self, user_id: u32, name: &str, expiry_us: u64) -> ShardReply {
        let token = generate_token();
        let expiry_at = token_expiry_at(expiry_us, self.now_us());
        let op = MetadataOp::InsertToken { user_id, name: name.to_owned(), token_hash: hash_token(&token), expiry_at };
        self.commit_internal(&op).await?;
        Ok(Answer::RawToken(token))
    }

    pub async fn delete_token(&self, user_id: u32, name: &str) -> ShardReply {
        self.commit_internal(&MetadataOp::RemoveToken { user_id, name: name.to_owned() }).await
    }

    pub fn get_tokens(&self, user_id: u32) -> Answer {
        Answer::Tokens(self.metadata.read(|m| {
            let tokens = m.user(user_id).map(|u| u.tokens.iter().collect::<Vec<_>>()).unwrap_or_default();
            tokens
                .into_iter()
                .map(|(name, token)| TokenInfo { name: name.clone(), expiry_at: token.expiry_at })
                .collect()
        }))
    }

    /// Removes every expired token; shard 0 runs this periodically.
    pub async fn remove_expired_tokens(&self) {
        let now = self.now_us();
        let expired: Vec<(u32, String)> = self.metadata.read(|m| {
            m.users()
                .flat_map(|u| {
                    u.tokens
                        .iter()
                        .filter(|(_, t)| t.expiry_at != 0 && t.expiry_at <= now)
                        .map(|(n, _)| (u.id, n.clone()))
                })
                .collect()
        });
        for (user_id, name) in expired {
            if let Err(code) = self.delete_token(user_id, &name).await {
                tracing::warn!(user_id, %code, "removing an expired token failed");
            }
        }
    }
}
