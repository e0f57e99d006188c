//! A bounds-checked little-endian cursor over a request body. Every read checks the
//! remaining length first, so a lying length field is an error, never a panic or an allocation.

use crate::error::ErrorCode;

#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, position: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub fn position(&self) -> usize {
        self.position
    }

    pub fn bytes(&mut self, len: usize) -> Result<&'a [u8], ErrorCode> {
        if len > self.remaining() {
            return Err(ErrorCode::InvalidFormat);
        }
        let slice = &self.bytes[self.position..self.position + len];
        self.position += len;
        Ok(slice)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let slice = &self.bytes[self.position..];
        self.position = self.bytes.len();
        slice
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ErrorCode> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, ErrorCode> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u32(&mut self) -> Result<u32, ErrorCode> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, ErrorCode> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn u128(&mut self) -> Result<u128, ErrorCode> {
        Ok(u128::from_le_bytes(self.array()?))
    }

    pub fn bool(&mut self) -> Result<bool, ErrorCode> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(ErrorCode::InvalidFormat),
        }
    }

    /// A WireName: `[len u8 (1..=255)][UTF-8]`.
    pub fn name(&mut self) -> Result<String, ErrorCode> {
        let len = self.u8()? as usize;
        if len == 0 {
            return Err(ErrorCode::InvalidFormat);
        }
        self.utf8(len)
    }

    /// A string prefixed by a one-byte length that may be zero (passwords, tokens).
    pub fn short_string(&mut self) -> Result<String, ErrorCode> {
        let len = self.u8()? as usize;
        self.utf8(len)
    }

    fn utf8(&mut self, len: usize) -> Result<String, ErrorCode> {
        let bytes = self.bytes(len)?;
        std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| ErrorCode::InvalidFormat)
    }

    /// Fails when bytes are left over: every body must be consumed exactly.
    pub fn finish(&self) -> Result<(), ErrorCode> {
        if self.remaining() == 0 { Ok(()) } else { Err(ErrorCode::InvalidFormat) }
    }
}

/// Little-endian writers for reply bodies.
pub trait Put {
    fn put_u8(&mut self, value: u8);
    fn put_u16(&mut self, value: u16);
    fn put_u32(&mut self, value: u32);
    fn put_u64(&mut self, value: u64);
    fn put_u128(&mut self, value: u128);
    fn put_name(&mut self, value: &str);
    fn put_long_string(&mut self, value: &str);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, value: u8) {
        self.push(value);
    }
    fn put_u16(&mut self, value: u16) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u32(&mut self, value: u32) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u64(&mut self, value: u64) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u128(&mut self, value: u128) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    /// A WireName; callers guarantee 1..=255 bytes (names are validated on the way in).
    fn put_name(&mut self, value: &str) {
        let len = value.len().min(255);
        self.push(len as u8);
        self.extend_from_slice(&value.as_bytes()[..len]);
    }
    /// A `[len u32][UTF-8]` string.
    fn put_long_string(&mut self, value: &str) {
        self.put_u32(value.len() as u32);
        self.extend_from_slice(value.as_bytes());
    }
}
