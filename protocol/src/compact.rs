//! Flexible-version (KIP-482) encoding by hand, for messages kafka-protocol does not know (the
//! KIP-1279 mirror RPCs): a body writer and reader with compact strings and arrays and tagged
//! fields, request header v2 and response header v1 frames. The messages themselves live in
//! `mirror_api`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::Cursor;
use crate::error::{ProtocolError, Side};
use crate::frame::PREFIX;

/// A decoded request header v2 (flexible).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

// ---- writing ----------------------------------------------------------------------------

/// A flexible-version body writer.
#[derive(Default)]
pub struct W(pub(crate) BytesMut);

impl W {
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.0.put_i16(v);
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.put_i32(v);
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.0.put_i64(v);
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.0.put_u8(u8::from(v));
        self
    }
    pub fn uvarint(&mut self, mut v: u32) -> &mut Self {
        while v >= 0x80 {
            self.0.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.put_u8(v as u8);
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.uvarint(s.len() as u32 + 1);
        self.0.put_slice(s.as_bytes());
        self
    }
    pub fn nstr(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => self.str(s),
            None => self.uvarint(0),
        }
    }
    pub fn array_len(&mut self, n: usize) -> &mut Self {
        self.uvarint(n as u32 + 1)
    }
    pub fn strs(&mut self, v: &[String]) -> &mut Self {
        self.array_len(v.len());
        for s in v {
            self.str(s);
        }
        self
    }
    /// No tagged fields.
    pub fn tags(&mut self) -> &mut Self {
        self.uvarint(0)
    }
    /// Exactly one tagged field, `tag` holding `value`.
    pub fn tagged(&mut self, tag: u32, value: W) -> &mut Self {
        self.tag_section(vec![(tag, value)])
    }
    /// A tagged-field section of `fields`, written in ascending tag order (as Kafka requires);
    /// empty writes what [`W::tags`] does.
    pub fn tag_section(&mut self, mut fields: Vec<(u32, W)>) -> &mut Self {
        fields.sort_by_key(|(tag, _)| *tag);
        self.uvarint(fields.len() as u32);
        for (tag, value) in fields {
            let bytes = value.finish();
            self.uvarint(tag).uvarint(bytes.len() as u32);
            self.0.put_slice(&bytes);
        }
        self
    }
    pub fn uuid(&mut self, id: &[u8; 16]) -> &mut Self {
        self.0.put_slice(id);
        self
    }
    pub(crate) fn finish(self) -> BytesMut {
        self.0
    }
}

/// A whole response frame: prefix, header v1 (correlation id, no tags), body.
pub fn response_frame(correlation_id: i32, body: W) -> Bytes {
    let body = body.finish();
    let mut b = BytesMut::with_capacity(PREFIX + 5 + body.len());
    b.put_i32((4 + 1 + body.len()) as i32);
    b.put_i32(correlation_id);
    b.put_u8(0);
    b.put_slice(&body);
    b.freeze()
}

/// A whole request frame: prefix, header v2, body.
pub fn request_frame(api_key: i16, correlation_id: i32, client_id: &str, body: W) -> Bytes {
    let body = body.finish();
    let mut b = BytesMut::with_capacity(PREFIX + 12 + client_id.len() + body.len());
    b.put_i32((2 + 2 + 4 + 2 + client_id.len() + 1 + body.len()) as i32);
    b.put_i16(api_key);
    b.put_i16(0);
    b.put_i32(correlation_id);
    b.put_i16(client_id.len() as i16);
    b.put_slice(client_id.as_bytes());
    b.put_u8(0);
    b.put_slice(&body);
    b.freeze()
}

// ---- reading ----------------------------------------------------------------------------

/// A flexible-version body reader over a frame.
pub struct R<'a>(pub(crate) Cursor<'a>);

fn bad(detail: String, side: Side) -> ProtocolError {
    ProtocolError::Malformed {
        what: "mirror RPC",
        detail,
        side,
    }
}

impl<'a> R<'a> {
    pub(crate) fn new(frame: &'a [u8], at: usize, side: Side) -> Self {
        Self(Cursor::new(frame, at, "mirror RPC", side))
    }
    pub fn i16(&mut self) -> Result<i16, ProtocolError> {
        self.0.i16()
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.0.remaining()
    }
    pub fn i32(&mut self) -> Result<i32, ProtocolError> {
        self.0.i32()
    }
    pub fn i64(&mut self) -> Result<i64, ProtocolError> {
        let b = self.0.take(8)?;
        Ok(i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }
    pub fn bool(&mut self) -> Result<bool, ProtocolError> {
        Ok(self.0.take(1)?[0] != 0)
    }
    pub fn nstr(&mut self) -> Result<Option<String>, ProtocolError> {
        let n = self.0.uvarint()?;
        if n == 0 {
            return Ok(None);
        }
        let b = self.0.take(n as usize - 1)?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| bad("string is not UTF-8".into(), Side::Client))
    }
    pub fn str(&mut self) -> Result<String, ProtocolError> {
        Ok(self.nstr()?.unwrap_or_default())
    }
    /// Array length (a null array reads as empty), checked against the bytes left.
    pub fn array_len(&mut self) -> Result<usize, ProtocolError> {
        let n = self.0.uvarint()?.saturating_sub(1);
        self.0.count(u64::from(n))
    }
    pub fn strs(&mut self) -> Result<Vec<String>, ProtocolError> {
        (0..self.array_len()?).map(|_| self.str()).collect()
    }
    pub fn uuid(&mut self) -> Result<[u8; 16], ProtocolError> {
        let b = self.0.take(16)?;
        let mut id = [0u8; 16];
        id.copy_from_slice(b);
        Ok(id)
    }
    /// Tagged fields as `(tag, bytes)`.
    pub fn tags(&mut self) -> Result<Vec<(u32, &'a [u8])>, ProtocolError> {
        let n = self.0.uvarint()?;
        self.0.count(u64::from(n))?;
        let mut out = Vec::new();
        for _ in 0..n {
            let tag = self.0.uvarint()?;
            let size = self.0.uvarint()?;
            out.push((tag, self.0.take(size as usize)?));
        }
        Ok(out)
    }
}

/// Reads a request header v2 and returns it with a reader positioned at the body.
pub fn read_request(frame: &[u8]) -> Result<(Header, R<'_>), ProtocolError> {
    let mut c = Cursor::new(frame, PREFIX, "request header", Side::Client);
    let api_key = c.i16()?;
    let api_version = c.i16()?;
    let correlation_id = c.i32()?;
    let n = c.i16()?;
    let client_id = if n < 0 {
        None
    } else {
        Some(String::from_utf8_lossy(c.take(n as usize)?).into_owned())
    };
    let mut r = R(c);
    r.tags()?;
    Ok((
        Header {
            api_key,
            api_version,
            correlation_id,
            client_id,
        },
        r,
    ))
}

/// A reader at the body of a response frame (header v1), and its correlation id.
pub fn read_response(frame: &[u8]) -> Result<(i32, R<'_>), ProtocolError> {
    let mut r = R::new(frame, PREFIX, Side::Broker);
    let correlation_id = r.i32()?;
    r.tags()?;
    Ok((correlation_id, r))
}
