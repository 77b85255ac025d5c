//! How model files hold a forest.

use std::collections::VecDeque;
use std::fmt;
use std::sync::OnceLock;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Forest, Node, LEAF};

/// A forest as model files hold it (since model format 2): each tree's nodes level by level
/// from its root, a split as `[column, threshold]` and a leaf as its value, a split's children
/// the next two nodes not yet placed, so no node names another. Gzipped, the H200's 600-tree
/// models at depth 9 take about 60% of the bytes of their nodes with child links, the form
/// format 1 stored and which still loads (`roots` and `nodes`).
#[derive(Serialize, Deserialize)]
struct Stored {
    base: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    trees: Vec<Vec<Entry>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    roots: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    nodes: Vec<Node>,
}

/// One stored node: a split's column (with the `MISSING_LEFT` bit) and threshold, or a leaf's value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Entry {
    Split(u32, f32),
    Leaf(f32),
}

impl Serialize for Entry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            Entry::Leaf(value) => serializer.serialize_f32(value),
            Entry::Split(column, threshold) => {
                let mut pair = serializer.serialize_tuple(2)?;
                pair.serialize_element(&column)?;
                pair.serialize_element(&threshold)?;
                pair.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = Entry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a leaf's value or a split's [column, threshold]")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Entry, E> {
                Ok(Entry::Leaf(v as f32))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Entry, E> {
                Ok(Entry::Leaf(v as f32))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Entry, E> {
                Ok(Entry::Leaf(v as f32))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entry, A::Error> {
                let column: u32 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let threshold: f32 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if column == LEAF || seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom("a split is a column and a threshold"));
                }
                Ok(Entry::Split(column, threshold))
            }
        }
        deserializer.deserialize_any(EntryVisitor)
    }
}

impl Serialize for Forest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let trees = self.roots.iter().map(|&root| self.levels(root)).collect();
        Stored { base: self.base, trees, roots: Vec::new(), nodes: Vec::new() }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Forest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = Stored::deserialize(deserializer)?;
        if stored.trees.is_empty() {
            return Ok(Forest { base: stored.base, roots: stored.roots, nodes: stored.nodes, walk: OnceLock::new() });
        }
        let mut forest = Forest::empty(stored.base);
        for entries in stored.trees {
            let first = forest.nodes.len() as u32;
            forest.roots.push(first);
            let mut next = first + 1;
            for entry in entries {
                forest.nodes.push(match entry {
                    Entry::Leaf(value) => Node(LEAF, value, 0, 0),
                    Entry::Split(column, threshold) => {
                        next += 2;
                        Node(column, threshold, next - 2, next - 1)
                    }
                });
            }
            if next as usize != forest.nodes.len() {
                return Err(de::Error::custom(format!(
                    "a tree's splits have {} children where it has {} nodes below its root",
                    next - first - 1,
                    forest.nodes.len() as u32 - first - 1
                )));
            }
        }
        Ok(forest)
    }
}

impl Forest {
    /// The tree under `root`, level by level, left before right.
    fn levels(&self, root: u32) -> Vec<Entry> {
        let mut entries = Vec::new();
        let mut queue = VecDeque::from([root]);
        while let Some(i) = queue.pop_front() {
            let Node(column, value, left, right) = self.nodes[i as usize];
            if column == LEAF {
                entries.push(Entry::Leaf(value));
            } else {
                entries.push(Entry::Split(column, value));
                queue.extend([left, right]);
            }
        }
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::lopsided;
    use super::super::MISSING_LEFT;
    use super::*;

    #[test]
    fn a_forest_is_stored_level_by_level_and_reads_back_the_same() {
        let forest = lopsided();
        let text = serde_json::to_string(&forest).unwrap();
        assert_eq!(
            text,
            format!(r#"{{"base":0.5,"trees":[[2.0],[[{},0.5],-1.0,[0,3.0],7.0,11.0]]}}"#, 1 | MISSING_LEFT)
        );
        assert_eq!(serde_json::from_str::<Forest>(&text).unwrap(), forest);
        // Format 1's nodes with child links load as they were.
        let linked = r#"{"base":0.5,"roots":[0,1],"nodes":[[4294967295,2.0,0,0],[2147483649,0.5,2,3],[4294967295,-1.0,0,0],[0,3.0,4,5],[4294967295,7.0,0,0],[4294967295,11.0,0,0]]}"#;
        assert_eq!(serde_json::from_str::<Forest>(linked).unwrap(), forest);
        for bad in [
            r#"{"base":0,"trees":[[[0,1.0],2.0]]}"#,
            r#"{"base":0,"trees":[[1.0,2.0]]}"#,
            r#"{"base":0,"trees":[[[4294967295,1.0],2.0,3.0]]}"#,
            r#"{"base":0,"trees":[[[0,1.0,5],2.0,3.0]]}"#,
        ] {
            assert!(serde_json::from_str::<Forest>(bad).is_err(), "{bad}");
        }
    }
}
