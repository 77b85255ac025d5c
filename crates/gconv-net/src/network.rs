//! A network as gconv sees it: its convolution layers with full shapes, in an order where
//! every layer comes after the layers that feed it, and which of them reach the output.
//! Non-convolution operations between layers (activations, pooling, additions,
//! concatenations) are not modelled; they work in whatever format their neighbours use.
//!
//! The text form, one line per layer (`#` starts a comment):
//!
//! ```text
//! conv1 <- input : v1:fwd:f32:NCHW:n1:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1
//! layer1.0.conv1 <- conv1 : v1:fwd:f32:NCHW:n1:c64:k64:i56x56:f1x1:s1x1:p0x0:d1x1
//! output <- layer1.0.conv1
//! ```
//!
//! A key's direction, data type and layout are ignored: settings choose them.

use std::collections::{BTreeMap, HashMap};

use gconv_core::{ConvProblem, DataType, Direction, Format, Layout};

use crate::{Error, Result};

/// What feeds a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The network's input.
    Input,
    /// An earlier layer, by index.
    Layer(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub name: String,
    /// Forward, fp32, NCHW-family: the shape every setting's problems derive from.
    pub shape: ConvProblem,
    pub inputs: Vec<Source>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub name: String,
    pub layers: Vec<Layer>,
    /// Layers whose outputs reach the network's output with no convolution in between.
    pub outputs: Vec<usize>,
}

/// The built-in networks, made by data/nets/make_nets.py from torchvision's models.
const BUILTIN: [(&str, &str); 18] = [
    ("resnet50", include_str!("../../../data/nets/resnet50.txt")),
    ("resnext50_32x4d", include_str!("../../../data/nets/resnext50_32x4d.txt")),
    ("mobilenet_v2", include_str!("../../../data/nets/mobilenet_v2.txt")),
    ("efficientnet_b0", include_str!("../../../data/nets/efficientnet_b0.txt")),
    ("convnext_tiny", include_str!("../../../data/nets/convnext_tiny.txt")),
    ("inception_v3", include_str!("../../../data/nets/inception_v3.txt")),
    ("squeezenet1_1", include_str!("../../../data/nets/squeezenet1_1.txt")),
    ("r3d_18", include_str!("../../../data/nets/r3d_18.txt")),
    ("resnet18", include_str!("../../../data/nets/resnet18.txt")),
    ("wide_resnet50_2", include_str!("../../../data/nets/wide_resnet50_2.txt")),
    ("vgg16", include_str!("../../../data/nets/vgg16.txt")),
    ("densenet121", include_str!("../../../data/nets/densenet121.txt")),
    ("shufflenet_v2_x1_0", include_str!("../../../data/nets/shufflenet_v2_x1_0.txt")),
    ("mnasnet1_0", include_str!("../../../data/nets/mnasnet1_0.txt")),
    ("mobilenet_v3_large", include_str!("../../../data/nets/mobilenet_v3_large.txt")),
    ("regnet_y_800mf", include_str!("../../../data/nets/regnet_y_800mf.txt")),
    ("efficientnet_v2_s", include_str!("../../../data/nets/efficientnet_v2_s.txt")),
    ("r2plus1d_18", include_str!("../../../data/nets/r2plus1d_18.txt")),
];

/// The shape a key names, as a layer keeps it.
fn canonical(p: &ConvProblem) -> ConvProblem {
    ConvProblem { direction: Direction::Forward, dtype: DataType::F32, layout: Layout::Nchw, ..p.clone() }
}

impl Network {
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN.iter().map(|(name, _)| *name)
    }

    pub fn builtin(name: &str) -> Option<Result<Network>> {
        BUILTIN.iter().find(|(n, _)| *n == name).map(|(n, text)| Network::parse(n, text))
    }

    /// Reads the text form; every error names its line.
    pub fn parse(name: &str, text: &str) -> Result<Network> {
        let mut net = Network { name: name.to_string(), layers: Vec::new(), outputs: Vec::new() };
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut saw_output = false;
        for (number, line) in text.lines().enumerate() {
            let bad = |reason: String| Error::BadNetwork { origin: name.to_string(), line: number + 1, reason };
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            // Names hold no colon; keys do, after the first.
            let (head, key) = match line.split_once(':') {
                Some((head, key)) => (head, Some(key.trim())),
                None => (line, None),
            };
            let (target, sources) = head
                .split_once("<-")
                .ok_or_else(|| bad("expected `NAME <- SOURCES : KEY` or `output <- LAYERS`".into()))?;
            let target = target.trim();
            let mut inputs = Vec::new();
            for source in sources.split_whitespace() {
                inputs.push(match source {
                    "input" => Source::Input,
                    _ => Source::Layer(
                        *index.get(source).ok_or_else(|| bad(format!("`{source}` is not a layer defined above")))?,
                    ),
                });
            }
            if inputs.is_empty() {
                return Err(bad(format!("`{target}` names nothing that feeds it")));
            }
            if target == "output" {
                if key.is_some() {
                    return Err(bad("the `output` line takes no problem key".into()));
                }
                if saw_output {
                    return Err(bad("a second `output` line".into()));
                }
                saw_output = true;
                for source in inputs {
                    match source {
                        Source::Layer(i) => net.outputs.push(i),
                        Source::Input => return Err(bad("the input reaches the output without a convolution".into())),
                    }
                }
                continue;
            }
            let key = key.ok_or_else(|| bad(format!("layer `{target}` has no problem key after `:`")))?;
            let shape = ConvProblem::from_key(key).map_err(|e| bad(e.to_string()))?;
            shape.validate().map_err(|e| bad(e.to_string()))?;
            if target.is_empty() || target == "input" || index.contains_key(target) {
                return Err(bad(format!("layer name `{target}` is empty, reserved or used twice")));
            }
            index.insert(target.to_string(), net.layers.len());
            net.layers.push(Layer { name: target.to_string(), shape: canonical(&shape), inputs });
        }
        if net.layers.is_empty() {
            return Err(Error::BadNetwork { origin: name.to_string(), line: 0, reason: "no layers".into() });
        }
        if !saw_output {
            net.outputs = net.sinks();
        }
        Ok(net)
    }

    /// A network from layers made elsewhere (an imported model): every shape valid, names
    /// distinct, every layer fed by the input or earlier layers; outputs default to the layers
    /// that feed none.
    pub fn from_layers(name: &str, layers: Vec<Layer>, outputs: Vec<usize>) -> Result<Network> {
        let bad = |reason: String| Error::BadNetwork { origin: name.to_string(), line: 0, reason };
        if layers.is_empty() {
            return Err(bad("no convolution layers".into()));
        }
        let mut names = std::collections::HashSet::new();
        for (i, layer) in layers.iter().enumerate() {
            layer.shape.validate().map_err(|e| bad(format!("layer `{}`: {e}", layer.name)))?;
            if layer.name.is_empty()
                || layer.name == "input"
                || layer.name == "output"
                || !names.insert(layer.name.as_str())
            {
                return Err(bad(format!("layer name `{}` is empty, reserved or used twice", layer.name)));
            }
            if layer.inputs.is_empty() || layer.inputs.iter().any(|s| matches!(s, Source::Layer(j) if *j >= i)) {
                return Err(bad(format!("layer `{}` is not fed by the input or earlier layers", layer.name)));
            }
        }
        if outputs.iter().any(|&o| o >= layers.len()) {
            return Err(bad("an output names no layer".into()));
        }
        let layers = layers.into_iter().map(|l| Layer { shape: canonical(&l.shape), ..l }).collect();
        let mut net = Network { name: name.to_string(), layers, outputs };
        if net.outputs.is_empty() {
            net.outputs = net.sinks();
        }
        Ok(net)
    }

    /// Problems in order, each fed by the one before (a file of driver lines); the last one's
    /// output is the network's.
    pub fn chain(name: &str, shapes: &[ConvProblem]) -> Result<Network> {
        if shapes.is_empty() {
            return Err(Error::BadNetwork { origin: name.to_string(), line: 0, reason: "no layers".into() });
        }
        let layers: Vec<Layer> = shapes
            .iter()
            .enumerate()
            .map(|(i, p)| Layer {
                name: format!("layer{i}"),
                shape: canonical(p),
                inputs: vec![if i == 0 { Source::Input } else { Source::Layer(i - 1) }],
            })
            .collect();
        Ok(Network { name: name.to_string(), outputs: vec![layers.len() - 1], layers })
    }

    /// Layers that feed no other layer.
    fn sinks(&self) -> Vec<usize> {
        (0..self.layers.len()).filter(|&i| !self.layers.iter().any(|l| l.inputs.contains(&Source::Layer(i)))).collect()
    }

    /// The network at batch `n`.
    pub fn with_batch(mut self, n: u32) -> Network {
        self.layers.iter_mut().for_each(|l| l.shape.n = n);
        self
    }

    pub fn batch(&self) -> u32 {
        self.layers[0].shape.n
    }

    /// Layer `i`'s problem in one format and direction.
    pub fn problem(&self, i: usize, format: Format, direction: Direction) -> ConvProblem {
        ConvProblem { direction, dtype: format.dtype, layout: format.layout, ..self.layers[i].shape.clone() }
    }

    /// Distinct shapes, each with the layers that have it, in first-seen order: each is
    /// measured once.
    pub fn distinct(&self) -> Vec<(ConvProblem, Vec<usize>)> {
        let mut order: Vec<(ConvProblem, Vec<usize>)> = Vec::new();
        let mut seen: HashMap<&ConvProblem, usize> = HashMap::new();
        for (i, layer) in self.layers.iter().enumerate() {
            match seen.get(&layer.shape) {
                Some(&at) => order[at].1.push(i),
                None => {
                    seen.insert(&layer.shape, order.len());
                    order.push((layer.shape.clone(), vec![i]));
                }
            }
        }
        order
    }

    /// Identifies the network: its layers' shape keys with counts, and its edges.
    pub fn fingerprint(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        for layer in &self.layers {
            hasher.update(layer.shape.key().as_bytes());
            for source in &layer.inputs {
                hasher.update(
                    match source {
                        Source::Input => b"<input;".to_vec(),
                        Source::Layer(i) => format!("<{i};").into_bytes(),
                    }
                    .as_slice(),
                );
            }
            hasher.update(b"\n");
        }
        format!("{FINGERPRINT_VERSION}:{}", &hasher.finalize().to_hex()[..32])
    }

    /// Each distinct shape key with how many layers have it.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        self.distinct().into_iter().map(|(p, layers)| (p.key(), layers.len())).collect()
    }
}

/// Bumped when what the fingerprint covers changes.
const FINGERPRINT_VERSION: &str = "net1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_network_parses_with_its_edges() {
        for name in Network::builtin_names() {
            let net = Network::builtin(name).unwrap().unwrap();
            // VGG-16's 13 convolutions are the fewest.
            assert!(net.layers.len() >= 13, "{name}: {} layers", net.layers.len());
            assert!(!net.outputs.is_empty());
            assert_eq!(net.layers[0].inputs, vec![Source::Input], "{name}");
        }
        let resnet = Network::builtin("resnet50").unwrap().unwrap();
        assert_eq!(resnet.layers.len(), 53);
        // 53 layers, of which the repeated bottleneck blocks share shapes.
        assert!(resnet.distinct().len() < 30);
        assert_eq!(resnet.counts().values().sum::<usize>(), 53);
    }

    #[test]
    fn bad_lines_are_reported_with_their_numbers() {
        let cases = [
            ("a <- input : v1:fwd:f32:NCHW:n1:c3:k8:i8x8:f3x3:s1x1:p1x1:d1x1\nb <- c : v1:fwd:f32:NCHW:n1:c8:k8:i8x8:f3x3:s1x1:p1x1:d1x1", 2, "not a layer defined above"),
            ("a <- input : v1:nonsense", 1, "invalid problem key"),
            ("a <- input", 1, "no problem key"),
            ("just words", 1, "expected"),
            ("", 0, "no layers"),
        ];
        for (text, line, message) in cases {
            match Network::parse("t", text) {
                Err(Error::BadNetwork { line: l, reason, .. }) => {
                    assert_eq!(l, line, "{text}");
                    assert!(reason.contains(message), "{reason}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_batch_and_a_fingerprint() {
        let net = Network::builtin("squeezenet1_1").unwrap().unwrap().with_batch(8);
        assert_eq!(net.batch(), 8);
        let same = Network::builtin("squeezenet1_1").unwrap().unwrap().with_batch(8);
        assert_eq!(net.fingerprint(), same.fingerprint());
        assert_ne!(net.fingerprint(), same.with_batch(16).fingerprint());
    }
}
