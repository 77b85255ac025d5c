//! A network's convolution layers from an ONNX file. tract-onnx reads the model and infers
//! every tensor's shape (models that record no intermediate shapes included); reading stops at
//! the typed model, before tract's optimising passes rewrite convolutions. A symbolic batch is
//! bound to the batch asked for.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use gconv_core::{ConvProblem, DataType, Direction, Layout, SpatialDim};
use gconv_net::{Layer, Network, Source};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat};
use tract_onnx::tract_core::ops::nn::DataFormat;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {reason}")]
    Onnx { path: String, reason: String },
    #[error(transparent)]
    Net(#[from] gconv_net::Error),
}

/// The convolutions of the ONNX model at `path`, in evaluation order, each fed by the layers
/// (or the model's input) that reach it through other operators. `batch` binds a symbolic
/// batch dimension; a model with a fixed batch keeps it (the caller may change it after).
pub fn read(path: &Path, batch: Option<u32>) -> Result<Network, Error> {
    let bad = |reason: String| Error::Onnx { path: path.display().to_string(), reason };
    let tract = |e: TractError| bad(format!("{e:#}"));
    let model = tract_onnx::onnx().model_for_path(path).map_err(tract)?;
    let model = model.into_typed().map_err(tract)?;
    let model = bind_batch(model, batch).map_err(bad)?;
    let name = path.file_stem().map_or_else(|| "onnx".to_string(), |s| s.to_string_lossy().into_owned());
    let order = model.eval_order().map_err(tract)?;
    let inputs: HashSet<usize> = model.input_outlets().map_err(tract)?.iter().map(|o| o.node).collect();
    let mut layer_of: HashMap<usize, usize> = HashMap::new();
    let mut layers: Vec<Layer> = Vec::new();
    for &id in &order {
        let node = &model.nodes[id];
        let Some(conv) = node.op_as::<Conv>() else { continue };
        let input = model.outlet_fact(node.inputs[0]).map_err(tract)?;
        let shape =
            problem(conv, &input.shape).map_err(|reason| bad(format!("convolution `{}`: {reason}", node.name)))?;
        let feeds = sources(&model, node.inputs[0], &layer_of, &inputs);
        layer_of.insert(id, layers.len());
        layers.push(Layer { name: node.name.clone(), shape, inputs: feeds });
    }
    let mut outputs: Vec<usize> = Vec::new();
    for outlet in model.output_outlets().map_err(tract)? {
        for source in sources(&model, *outlet, &layer_of, &inputs) {
            if let Source::Layer(i) = source {
                if !outputs.contains(&i) {
                    outputs.push(i);
                }
            }
        }
    }
    Ok(Network::from_layers(&name, layers, outputs)?)
}

/// The model with its symbolic batch bound to `batch`; any other symbol left in a
/// convolution's input is an error later, with that layer's name.
fn bind_batch(model: TypedModel, batch: Option<u32>) -> Result<TypedModel, String> {
    let mut symbols: HashSet<Symbol> = HashSet::new();
    for outlet in model.input_outlets().map_err(|e| e.to_string())? {
        let fact = model.outlet_fact(*outlet).map_err(|e| e.to_string())?;
        if let Some(first) = fact.shape.iter().next() {
            symbols.extend(first.symbols());
        }
    }
    if symbols.is_empty() {
        return Ok(model);
    }
    let names: Vec<String> = symbols.iter().map(|s| s.to_string()).collect();
    let batch = batch.ok_or_else(|| format!("the batch is symbolic ({}): give --batch", names.join(", ")))?;
    let values: HashMap<Symbol, TDim> = symbols.into_iter().map(|s| (s, TDim::Val(i64::from(batch)))).collect();
    model.set_symbols(&values).map_err(|e| format!("binding the batch ({}) to {batch}: {e:#}", names.join(", ")))
}

/// The forward fp32 problem of a convolution on an input of `shape`.
fn problem(conv: &Conv, shape: &ShapeFact) -> Result<ConvProblem, String> {
    if conv.q_params.is_some() {
        return Err("a quantized convolution is not a gconv problem".into());
    }
    if conv.kernel_fmt != KernelFormat::OIHW {
        return Err(format!("kernel format {:?}: ONNX models give OIHW", conv.kernel_fmt));
    }
    let dims = shape
        .as_concrete()
        .ok_or_else(|| format!("input shape {shape:?} is not concrete (a symbol other than the batch?)"))?;
    let spec = &conv.pool_spec;
    let (n, c, spatial) = match (spec.data_format, dims) {
        (DataFormat::NCHW, [n, c, spatial @ ..]) => (*n, *c, spatial),
        (format, _) => {
            return Err(format!(
                "input layout {format:?} with shape {dims:?}: expected N, C, then 1 to 3 spatial sizes"
            ))
        }
    };
    if !(1..=3).contains(&spatial.len()) {
        return Err(format!("{} spatial dimensions; gconv takes 1 to 3", spatial.len()));
    }
    let (strides, dilations) = (spec.strides(), spec.dilations());
    let padding = spec.computed_padding(spatial);
    let size = |v: usize, what: &str| u32::try_from(v).map_err(|_| format!("{what} {v} is too large"));
    let mut out = Vec::with_capacity(spatial.len());
    for (d, &input) in spatial.iter().enumerate() {
        let (before, after) = (padding[d].pad_before, padding[d].pad_after);
        if before != after {
            return Err(format!(
                "padding {before} before and {after} after along spatial axis {d}; gconv pads both sides alike"
            ));
        }
        out.push(SpatialDim {
            input: size(input, "input size")?,
            filter: size(spec.kernel_shape[d], "filter size")?,
            stride: size(strides[d], "stride")?,
            pad: size(before, "padding")?,
            dilation: size(dilations[d], "dilation")?,
        });
    }
    Ok(ConvProblem {
        direction: Direction::Forward,
        dtype: DataType::F32,
        layout: Layout::Nchw,
        n: size(n, "batch")?,
        c: size(c, "input channels")?,
        k: size(spec.output_channels, "output channels")?,
        g: size(conv.group, "groups")?,
        dims: out,
    })
}

/// The convolutions (or the model's input) that reach `outlet` through other operators.
fn sources(
    model: &TypedModel,
    outlet: OutletId,
    layer_of: &HashMap<usize, usize>,
    inputs: &HashSet<usize>,
) -> Vec<Source> {
    let mut found: Vec<Source> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack = vec![outlet.node];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let source = match layer_of.get(&id) {
            Some(&layer) => Some(Source::Layer(layer)),
            None if inputs.contains(&id) => Some(Source::Input),
            // Weights and other constants feed operators but carry no activation.
            None => {
                stack.extend(model.nodes[id].inputs.iter().map(|o| o.node));
                None
            }
        };
        if let Some(source) = source.filter(|s| !found.contains(s)) {
            found.push(source);
        }
    }
    found.sort_by_key(|s| match s {
        Source::Input => 0,
        Source::Layer(i) => i + 1,
    });
    found
}

/// ONNX models (`.onnx` files) as a network format.
pub struct Onnx;

impl gconv_net::NetworkFormat for Onnx {
    fn name(&self) -> &'static str {
        "an ONNX model (.onnx)"
    }

    fn claims(&self, spec: &str) -> bool {
        Path::new(spec).extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
    }

    fn read(&self, spec: &str, batch: Option<u32>) -> gconv_net::Result<Network> {
        let path = Path::new(spec);
        if !path.is_file() {
            return Err(gconv_net::Error::BadNetwork {
                origin: spec.to_string(),
                line: 0,
                reason: "no such ONNX file".into(),
            });
        }
        read(path, batch).map_err(|e| match e {
            Error::Net(e) => e,
            Error::Onnx { reason, .. } => gconv_net::Error::BadNetwork { origin: spec.to_string(), line: 0, reason },
        })
    }
}
