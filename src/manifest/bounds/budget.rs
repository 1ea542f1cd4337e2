//! What one render may decode: a [`Budget`] charged for every node as a document is
//! built into a JSON value, by a serde visitor that builds it as serde_json's own
//! `Deserialize` does.

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

use super::{Exceeded, DECODED_PER_BYTE, MAX_DOCUMENT_SIZE};

/// What one node costs beyond its text: a decoded value takes several times the bytes of
/// its JSON, and most of it is per node.
const NODE_COST: u64 = 16;

/// What one render may decode, and what stopped a decode. A render may build
/// [`DECODED_PER_BYTE`] units for each byte it has read, plus one document's worth, up to
/// a cap: memory stays proportional to what the repository holds, whatever its aliases.
/// Not shared between threads: an encrypted file decoded on another thread gets a
/// budget of its own, set aside from this one ([`Budget::set_aside`]), and so does each
/// piece of a long YAML stream (a share of what is left, `decode::Stream::in_pieces`).
pub struct Budget {
    used: Cell<u64>,
    granted: Cell<u64>,
    cap: u64,
    document_left: Cell<u64>,
    exceeded: RefCell<Option<Exceeded>>,
}

impl Budget {
    /// A render's budget, never more than `cap` units.
    pub fn new(cap: u64) -> Self {
        Budget {
            used: Cell::new(0),
            granted: Cell::new(MAX_DOCUMENT_SIZE.min(cap)),
            cap,
            document_left: Cell::new(MAX_DOCUMENT_SIZE),
            exceeded: RefCell::new(None),
        }
    }

    /// Grants what `bytes` more of input may decode to.
    pub fn read(&self, bytes: usize) {
        let more = (bytes as u64).saturating_mul(DECODED_PER_BYTE);
        self.granted
            .set(self.granted.get().saturating_add(more).min(self.cap));
    }

    /// Decodes one document (a serde_yaml or serde_json document) into a JSON value,
    /// within the budget.
    ///
    /// # Errors
    /// The deserializer's error; when a bound was hit, [`Budget::exceeded`] says which.
    pub fn decode<'de, D: de::Deserializer<'de>>(&self, document: D) -> Result<Value, D::Error> {
        self.document_left.set(MAX_DOCUMENT_SIZE);
        self.exceeded.replace(None);
        Build(self).deserialize(document)
    }

    /// Takes the bound the last [`Budget::decode`] went past, if one stopped it.
    pub fn exceeded(&self) -> Option<Exceeded> {
        self.exceeded.take()
    }

    /// Charges documents decoded earlier (kept in the cache) to the render.
    ///
    /// # Errors
    /// [`Exceeded::Render`] when they do not fit.
    pub fn charge_decoded(&self, size: u64) -> Result<(), Exceeded> {
        let used = self.used.get() + size;
        if used > self.granted.get() {
            return Err(Exceeded::Render);
        }
        self.used.set(used);
        Ok(())
    }

    /// Grants what `bytes` more of input may decode to and sets it aside at once, for
    /// that input to be decoded on another thread within a budget of its own of that
    /// size ([`Budget::new`]); `None` near the render's cap, where it is decoded here.
    pub fn set_aside(&self, bytes: usize) -> Option<u64> {
        let share = (bytes as u64).saturating_mul(DECODED_PER_BYTE);
        let (granted, used) = (self.granted.get().saturating_add(share), self.used.get());
        if granted > self.cap || used.saturating_add(share) > granted {
            return None;
        }
        self.granted.set(granted);
        self.used.set(used + share);
        Some(share)
    }

    /// Undoes [`Budget::set_aside`]: the input is decoded here after all.
    pub fn give_back(&self, share: u64) {
        self.granted.set(self.granted.get() - share);
        self.used.set(self.used.get() - share);
    }

    /// What the render may decode, given what it has read so far.
    pub fn limit(&self) -> u64 {
        self.granted.get()
    }

    /// What the render has built so far.
    pub fn used(&self) -> u64 {
        self.used.get()
    }

    fn charge<E: de::Error>(&self, text: usize) -> Result<(), E> {
        let cost = NODE_COST + text as u64;
        let (doc, used) = (self.document_left.get(), self.used.get());
        let over = if cost > doc {
            Exceeded::Document
        } else if used + cost > self.granted.get() {
            Exceeded::Render
        } else {
            self.document_left.set(doc - cost);
            self.used.set(used + cost);
            return Ok(());
        };
        Err(self.stop(over))
    }

    fn stop<E: de::Error>(&self, why: Exceeded) -> E {
        let message = match &why {
            Exceeded::DuplicateKey(key) => format!("duplicate key {key:?}"),
            _ => "decoded size limit".to_string(),
        };
        self.exceeded.replace(Some(why));
        E::custom(message)
    }
}

/// Builds a [`Value`] as serde_json's own `Deserialize` does, charging every node.
struct Build<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for Build<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.charge(v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.0.charge(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Build(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.0.charge(key.len())?;
            match object.entry(key) {
                Entry::Occupied(e) => {
                    return Err(self.0.stop(Exceeded::DuplicateKey(e.key().clone())))
                }
                Entry::Vacant(e) => e.insert(map.next_value_seed(Build(self.0))?),
            };
        }
        Ok(Value::Object(object))
    }
}
