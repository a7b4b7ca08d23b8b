//! Parsed points between nodes: a compact binary form of [`Line`]s, so the node that receives a
//! line-protocol request parses it once and a shard's leader reads typed points without parsing
//! text again.
//!
//! ```text
//! points  = version:u8 point*
//! point   = line_no:varint name ntags:varint (name name)* nfields:varint (name field)* time
//! name    = len:varint utf8-bytes
//! field   = 0 f64-le | 1 i64-le | 2 u64-le | 3 bool:u8 | 4 name
//! time    = 0 | 1 i64-le            (absent, or in the request's precision)
//! ```
//!
//! The reader borrows every string from the buffer, checks every length against what is left
//! and every string for UTF-8, and allocates nothing per point (tags and fields live inline in
//! the [`Line`]); a buffer of another version is refused whole.

use std::borrow::Cow;

use super::{FieldValue, Line};

/// The version of the encoding this build writes and reads.
pub const POINTS_VERSION: u8 = 1;

/// Why encoded points could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PointsError {
    /// The buffer is of a version this build does not read.
    #[error(
        "points of encoding version {}, this build reads version {POINTS_VERSION}",
        found.map_or("none (an empty buffer)".to_string(), |v| v.to_string())
    )]
    Version {
        /// The buffer's version (`None`: the buffer is empty).
        found: Option<u8>,
    },
    /// The buffer ends inside a point or holds a value no writer produces.
    #[error("damaged points at byte {at}: {what}")]
    Damaged {
        /// Offset of the damage.
        at: usize,
        /// What was wrong there.
        what: &'static str,
    },
}

/// Appends points to a buffer in the wire form.
#[derive(Debug)]
pub struct PointsWriter {
    buf: Vec<u8>,
    points: usize,
}

impl Default for PointsWriter {
    fn default() -> Self {
        PointsWriter { buf: vec![POINTS_VERSION], points: 0 }
    }
}

impl PointsWriter {
    /// Appends `line`, numbered `no` in its request.
    pub fn push(&mut self, no: usize, line: &Line<'_>) {
        let b = &mut self.buf;
        varint(b, no as u64);
        name(b, &line.measurement);
        varint(b, line.tags.len() as u64);
        for (k, v) in &line.tags {
            name(b, k);
            name(b, v);
        }
        varint(b, line.fields.len() as u64);
        for (k, v) in &line.fields {
            name(b, k);
            match v {
                FieldValue::Float(x) => {
                    b.push(0);
                    b.extend_from_slice(&x.to_le_bytes());
                }
                FieldValue::Integer(x) => {
                    b.push(1);
                    b.extend_from_slice(&x.to_le_bytes());
                }
                FieldValue::UInteger(x) => {
                    b.push(2);
                    b.extend_from_slice(&x.to_le_bytes());
                }
                FieldValue::Boolean(x) => b.extend_from_slice(&[3, u8::from(*x)]),
                FieldValue::String(s) => {
                    b.push(4);
                    name(b, s);
                }
            }
        }
        match line.timestamp {
            None => b.push(0),
            Some(t) => {
                b.push(1);
                b.extend_from_slice(&t.to_le_bytes());
            }
        }
        self.points += 1;
    }

    /// Points appended so far.
    pub fn len(&self) -> usize {
        self.points
    }

    /// True if no point was appended.
    pub fn is_empty(&self) -> bool {
        self.points == 0
    }

    /// Bytes of the encoding so far.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// The encoded points.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push((v as u8) | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

fn name(b: &mut Vec<u8>, s: &str) {
    varint(b, s.len() as u64);
    b.extend_from_slice(s.as_bytes());
}

/// Reads the points of a buffer [`PointsWriter`] wrote, in order.
#[derive(Debug, Clone)]
pub struct PointsReader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> PointsReader<'a> {
    /// A reader of `buf`, refused if `buf` is of another version.
    pub fn new(buf: &'a [u8]) -> Result<Self, PointsError> {
        match buf.first() {
            Some(&POINTS_VERSION) => Ok(PointsReader { buf, at: 1 }),
            found => Err(PointsError::Version { found: found.copied() }),
        }
    }

    fn damaged(&self, what: &'static str) -> PointsError {
        PointsError::Damaged { at: self.at, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PointsError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| self.damaged("ends early"))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, PointsError> {
        Ok(self.take(1)?[0])
    }

    fn word(&mut self) -> Result<[u8; 8], PointsError> {
        Ok(self.take(8)?.try_into().expect("8 bytes"))
    }

    fn varint(&mut self) -> Result<u64, PointsError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.damaged("a varint longer than 64 bits"))
    }

    /// A count of items of at least one byte each, no more than the bytes left.
    fn count(&mut self) -> Result<usize, PointsError> {
        let n = self.varint()?;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.buf.len() - self.at)
            .ok_or_else(|| self.damaged("a count larger than the buffer"))
    }

    fn name(&mut self) -> Result<Cow<'a, str>, PointsError> {
        let n = self.count()?;
        let at = self.at;
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes)
            .map(Cow::Borrowed)
            .map_err(|_| PointsError::Damaged { at, what: "a name that is not UTF-8" })
    }

    fn point(&mut self) -> Result<(usize, Line<'a>), PointsError> {
        let no = usize::try_from(self.varint()?).map_err(|_| self.damaged("a line number"))?;
        let measurement = self.name()?;
        let mut line = Line {
            measurement,
            tags: Default::default(),
            fields: Default::default(),
            timestamp: None,
        };
        for _ in 0..self.count()? {
            let k = self.name()?;
            line.tags.push((k, self.name()?));
        }
        for _ in 0..self.count()? {
            let k = self.name()?;
            let v = match self.byte()? {
                0 => FieldValue::Float(f64::from_le_bytes(self.word()?)),
                1 => FieldValue::Integer(i64::from_le_bytes(self.word()?)),
                2 => FieldValue::UInteger(u64::from_le_bytes(self.word()?)),
                3 => match self.byte()? {
                    0 => FieldValue::Boolean(false),
                    1 => FieldValue::Boolean(true),
                    _ => return Err(self.damaged("a boolean that is neither 0 nor 1")),
                },
                4 => FieldValue::String(self.name()?),
                _ => return Err(self.damaged("an unknown field type")),
            };
            line.fields.push((k, v));
        }
        line.timestamp = match self.byte()? {
            0 => None,
            1 => Some(i64::from_le_bytes(self.word()?)),
            _ => return Err(self.damaged("an unknown timestamp marker")),
        };
        Ok((no, line))
    }
}

impl<'a> Iterator for PointsReader<'a> {
    type Item = Result<(usize, Line<'a>), PointsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.buf.len() {
            return None;
        }
        let r = self.point();
        if r.is_err() {
            // Nothing after damage is read.
            self.at = self.buf.len();
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lp::Lines;

    const BODY: &str =
        "cpu,host=a,region=eu\\ west usage=1.5,n=-3i,u=7u,ok=t,msg=\"a \\\"q\\\"\" 1700\n\
                        \n\
                        mem free=0 \n\
                        disk,path=/ used=2e10,label=\"\" -5\n";

    type Numbered = Vec<(usize, Line<'static>)>;

    fn round_trip(body: &str) -> (Numbered, Numbered) {
        let parsed: Vec<_> = Lines::new(body)
            .map(|r| r.map(|(n, l)| (n, l.into_owned())))
            .collect::<Result<_, _>>()
            .unwrap();
        let mut w = PointsWriter::default();
        for (no, line) in &parsed {
            w.push(*no, line);
        }
        assert_eq!(w.len(), parsed.len());
        let buf = w.finish();
        let read: Vec<_> = PointsReader::new(&buf)
            .unwrap()
            .map(|r| r.map(|(n, l)| (n, l.into_owned())))
            .collect::<Result<_, _>>()
            .unwrap();
        (parsed, read)
    }

    #[test]
    fn points_read_back_as_they_were_parsed() {
        let (parsed, read) = round_trip(BODY);
        assert_eq!(read.len(), 3);
        assert_eq!(read, parsed);
        assert_eq!(read[1].0, 3, "line numbers of the request survive");
        assert_eq!(read[1].1.timestamp, None);
        assert_eq!(read[2].1.timestamp, Some(-5));
        let (parsed, read) = round_trip("");
        assert!(parsed.is_empty() && read.is_empty());
    }

    #[test]
    fn another_version_and_every_truncation_and_corruption_are_refused_without_panic() {
        let mut w = PointsWriter::default();
        for (no, line) in Lines::new(BODY).map(Result::unwrap) {
            w.push(no, &line);
        }
        let buf = w.finish();
        let mut other = buf.clone();
        other[0] = 2;
        assert!(matches!(PointsReader::new(&other), Err(PointsError::Version { .. })));
        assert!(matches!(PointsReader::new(&[]), Err(PointsError::Version { .. })));
        // Every prefix either reads whole points or reports damage; none panics.
        let mut damaged = 0;
        for end in 1..buf.len() {
            if PointsReader::new(&buf[..end]).unwrap().any(|r| r.is_err()) {
                damaged += 1;
            }
        }
        assert!(damaged > buf.len() / 2, "{damaged} of {} prefixes refused", buf.len());
        // Every single-byte change reads or is refused; a huge count is refused, not allocated.
        for i in 1..buf.len() {
            for b in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut c = buf.clone();
                c[i] = b;
                let _ = PointsReader::new(&c).unwrap().count();
            }
        }
        let mut huge = vec![POINTS_VERSION, 1, 1, b'm'];
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        let r: Vec<_> = PointsReader::new(&huge).unwrap().collect();
        assert!(matches!(r.as_slice(), [Err(PointsError::Damaged { .. })]), "{r:?}");
    }
}
