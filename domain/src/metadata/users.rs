//! Users and their personal access tokens in the metadata state machine: the operations
//! that create, change and remove them.

use std::collections::BTreeMap;

use super::user::{MAX_TOKENS_PER_USER, STATUS_ACTIVE, STATUS_INACTIVE, Token, User};
use super::{Applied, Metadata, lowest_free};
use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::permissions::Permissions;

const MAX_USERS: u32 = 1 << 20;

fn valid_username(username: &str) -> Result<(), ErrorCode> {
    if (3..=50).contains(&username.len()) { Ok(()) } else { Err(ErrorCode::InvalidUsername) }
}

fn valid_status(status: u8) -> Result<(), ErrorCode> {
    if matches!(status, STATUS_ACTIVE | STATUS_INACTIVE) { Ok(()) } else { Err(ErrorCode::InvalidUserStatus) }
}

impl Metadata {
    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    pub fn user_id(&self, user: &Identifier) -> Result<u32, ErrorCode> {
        match user {
            Identifier::Numeric(id) => self.users.contains_key(id).then_some(*id),
            Identifier::Name(name) => self.users.values().find(|u| &u.username == name).map(|u| u.id),
        }
        .ok_or(ErrorCode::ResourceNotFound)
    }

    pub fn user(&self, user_id: u32) -> Option<&User> {
        self.users.get(&user_id)
    }

    /// Whether `user_id` is an active user whose permissions grant `access`.
    pub fn user_allows(&self, user_id: u32, access: crate::permissions::Access) -> bool {
        self.user(user_id)
            .filter(|u| u.is_active())
            .and_then(|u| u.permissions.as_ref())
            .is_some_and(|p| p.allows(access))
    }

    pub fn user_by_name(&self, username: &str) -> Option<&User> {
        self.users.values().find(|u| u.username == username)
    }

    /// The user and token name a token hash belongs to.
    pub fn token_owner(&self, token_hash: &str) -> Option<(&User, &str, &Token)> {
        self.users.values().find_map(|user| {
            user.tokens.iter().find(|(_, t)| t.hash == token_hash).map(|(name, t)| (user, name.as_str(), t))
        })
    }

    pub(super) fn insert_user(
        &mut self,
        username: &str,
        password_hash: &str,
        status: u8,
        permissions: &Option<Permissions>,
        timestamp: u64,
    ) -> Result<Applied, ErrorCode> {
        valid_username(username)?;
        valid_status(status)?;
        if self.user_by_name(username).is_some() {
            return Err(ErrorCode::UserAlreadyExists);
        }
        let user_id = lowest_free(&self.users, MAX_USERS).ok_or(ErrorCode::UserAlreadyExists)?;
        let user = User {
            id: user_id,
            username: username.to_owned(),
            password_hash: password_hash.to_owned(),
            status,
            created_at: timestamp,
            permissions: permissions.clone(),
            tokens: BTreeMap::new(),
        };
        self.users.insert(user_id, user);
        Ok(Applied::UserChanged { user_id })
    }

    pub(super) fn update_user(
        &mut self,
        user: &Identifier,
        username: &Option<String>,
        status: Option<u8>,
    ) -> Result<Applied, ErrorCode> {
        let user_id = self.user_id(user)?;
        if let Some(username) = username {
            valid_username(username)?;
            if self.user_by_name(username).is_some_and(|other| other.id != user_id) {
                return Err(ErrorCode::UserAlreadyExists);
            }
        }
        if let Some(status) = status {
            valid_status(status)?;
        }
        let entry = self.users.get_mut(&user_id).expect("resolved above");
        if let Some(username) = username {
            entry.username = username.clone();
        }
        if let Some(status) = status {
            entry.status = status;
        }
        Ok(Applied::UserChanged { user_id })
    }

    pub(super) fn delete_user(&mut self, user: &Identifier) -> Result<Applied, ErrorCode> {
        let user_id = self.user_id(user)?;
        if user_id == 0 {
            return Err(ErrorCode::CannotDeleteUser);
        }
        self.users.remove(&user_id);
        Ok(Applied::UserChanged { user_id })
    }

    pub(super) fn update_permissions(
        &mut self,
        user: &Identifier,
        permissions: &Option<Permissions>,
    ) -> Result<Applied, ErrorCode> {
        let user_id = self.user_id(user)?;
        if user_id == 0 {
            return Err(ErrorCode::CannotChangePermissions);
        }
        self.users.get_mut(&user_id).expect("resolved above").permissions = permissions.clone();
        Ok(Applied::UserChanged { user_id })
    }

    pub(super) fn set_password(&mut self, user_id: u32, password_hash: &str) -> Result<Applied, ErrorCode> {
        let user = self.users.get_mut(&user_id).ok_or(ErrorCode::ResourceNotFound)?;
        user.password_hash = password_hash.to_owned();
        Ok(Applied::UserChanged { user_id })
    }

    pub(super) fn insert_token(
        &mut self,
        user_id: u32,
        name: &str,
        token_hash: &str,
        expiry_at: u64,
    ) -> Result<Applied, ErrorCode> {
        if !(3..=30).contains(&name.len()) {
            return Err(ErrorCode::InvalidPersonalAccessTokenName);
        }
        let user = self.users.get_mut(&user_id).ok_or(ErrorCode::ResourceNotFound)?;
        if user.tokens.contains_key(name) {
            return Err(ErrorCode::PersonalAccessTokenAlreadyExists);
        }
        if user.tokens.len() >= MAX_TOKENS_PER_USER {
            return Err(ErrorCode::PersonalAccessTokensLimitReached);
        }
        user.tokens.insert(name.to_owned(), Token { hash: token_hash.to_owned(), expiry_at });
        Ok(Applied::UserChanged { user_id })
    }

    pub(super) fn remove_token(&mut self, user_id: u32, name: &str) -> Result<Applied, ErrorCode> {
        let user = self.users.get_mut(&user_id).ok_or(ErrorCode::ResourceNotFound)?;
        user.tokens.remove(name).ok_or(ErrorCode::ResourceNotFound)?;
        Ok(Applied::UserChanged { user_id })
    }
}
