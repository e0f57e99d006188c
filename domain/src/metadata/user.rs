//! A user and its personal access tokens, as the metadata holds them. Passwords and tokens
//! appear here only as hashes made outside the domain.

use std::collections::BTreeMap;

use crate::permissions::Permissions;

pub const STATUS_ACTIVE: u8 = 1;
pub const STATUS_INACTIVE: u8 = 2;
pub const MAX_TOKENS_PER_USER: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub hash: String,
    /// Microseconds since the epoch; 0 never expires.
    pub expiry_at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: u32,
    pub username: String,
    pub password_hash: String,
    pub status: u8,
    pub created_at: u64,
    pub permissions: Option<Permissions>,
    pub tokens: BTreeMap<String, Token>,
}

impl User {
    pub fn is_active(&self) -> bool {
        self.status == STATUS_ACTIVE
    }
}
