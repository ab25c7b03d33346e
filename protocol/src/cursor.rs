//! A bounds-checked reader over frame bytes for the hand-written scanners (`peek`, `scan`):
//! every read that would run past the end is a [`ProtocolError::Malformed`], never a panic.

use bytes::Buf;

use crate::error::{ProtocolError, Side};

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pub(crate) pos: usize,
    what: &'static str,
    side: Side,
}

impl<'a> Cursor<'a> {
    /// Reads `buf` from `pos`; `what` and `side` label errors.
    pub(crate) fn new(buf: &'a [u8], pos: usize, what: &'static str, side: Side) -> Self {
        Self { buf, pos, what, side }
    }

    fn malformed(&self, detail: String) -> ProtocolError {
        ProtocolError::Malformed {
            what: self.what,
            detail,
            side: self.side,
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.malformed(format!("field of {n} bytes at {} runs past the {}-byte frame", self.pos, self.buf.len())))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// Bytes left after the current position.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// `n`, an element count read from the wire, once checked against the bytes left (every
    /// element takes at least one byte), as Kafka's own parsers check it.
    pub(crate) fn count(&self, n: u64) -> Result<usize, ProtocolError> {
        if n > self.remaining() as u64 {
            return Err(self.malformed(format!("count {n} at {} exceeds the {} bytes left", self.pos, self.remaining())));
        }
        Ok(n as usize)
    }

    pub(crate) fn skip(&mut self, n: usize) -> Result<(), ProtocolError> {
        self.take(n).map(|_| ())
    }

    pub(crate) fn i16(&mut self) -> Result<i16, ProtocolError> {
        self.take(2).map(|mut b| b.get_i16())
    }

    pub(crate) fn i32(&mut self) -> Result<i32, ProtocolError> {
        self.take(4).map(|mut b| b.get_i32())
    }

    /// A zig-zag signed varint (record fields).
    pub(crate) fn varint(&mut self) -> Result<i64, ProtocolError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err(self.malformed("varint longer than 10 bytes".into()))
    }

    pub(crate) fn uvarint(&mut self) -> Result<u32, ProtocolError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let byte = self.take(1)?[0];
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed("unsigned varint longer than 5 bytes".into()))
    }

    /// Skips a compact (varint length + 1) string, bytes or nullable variant.
    pub(crate) fn skip_compact_bytes(&mut self) -> Result<(), ProtocolError> {
        let len = self.uvarint()?;
        if len > 1 {
            self.skip(len as usize - 1)?;
        }
        Ok(())
    }

    /// Number of elements of a compact (nullable) array; null counts as 0. Checked against the
    /// bytes left.
    pub(crate) fn compact_array_len(&mut self) -> Result<u32, ProtocolError> {
        let n = self.uvarint()?.saturating_sub(1);
        self.count(u64::from(n))?;
        Ok(n)
    }

    /// Number of elements of an array, compact (flexible versions) or with an i32 count (older
    /// ones); null counts as 0. Checked against the bytes left.
    pub(crate) fn array_len(&mut self, flexible: bool) -> Result<usize, ProtocolError> {
        if flexible {
            return self.compact_array_len().map(|n| n as usize);
        }
        let n = self.i32()?;
        self.count(u64::try_from(n).unwrap_or(0))
    }

    /// Reads a tagged-field section; returns whether `wanted` was among the tags.
    pub(crate) fn tagged_fields_contain(&mut self, wanted: Option<u32>) -> Result<bool, ProtocolError> {
        let count = self.uvarint()?;
        self.count(u64::from(count))?;
        let mut found = false;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()?;
            self.skip(size as usize)?;
            found |= Some(tag) == wanted;
        }
        Ok(found)
    }

    pub(crate) fn skip_tagged_fields(&mut self) -> Result<(), ProtocolError> {
        self.tagged_fields_contain(None).map(|_| ())
    }
}
