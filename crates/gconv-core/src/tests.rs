use proptest::prelude::*;

use crate::reference::reference;
use crate::testing::small_problem;
use crate::{
    Config, ConvProblem, ConvTensors, DataType, Direction, Field, GconvError, Layout, Schema, SpatialDim, Tensor,
    Values,
};

fn problem_2d(n: u32, c: u32, k: u32, g: u32, hw: u32, f: u32) -> ConvProblem {
    ConvProblem {
        direction: Direction::Forward,
        dtype: DataType::F32,
        layout: Layout::Nchw,
        n,
        c,
        k,
        g,
        dims: vec![SpatialDim::new(hw, f), SpatialDim::new(hw, f)],
    }
}

proptest! {
    #[test]
    fn key_round_trips(p in small_problem()) {
        let key = p.key();
        prop_assert_eq!(ConvProblem::from_key(&key), Ok(p));
    }

    #[test]
    fn config_text_round_trips(fields in prop::collection::vec(("[a-z]{1,4}[0-9]{0,2}", any::<u32>()), 0..5)) {
        let mut seen = std::collections::HashSet::new();
        let fields: Vec<(String, u32)> = fields.into_iter().filter(|(n, _)| seen.insert(n.clone())).collect();
        let config = Config::new(fields.iter().map(|(n, v)| (n.as_str(), *v)));
        let text = config.to_string();
        prop_assert_eq!(text.parse::<Config>(), Ok(config));
    }
}

#[test]
fn key_format_is_stable() {
    let mut p = problem_2d(4, 64, 64, 32, 28, 3);
    p.dims.iter_mut().for_each(|d| d.pad = 1);
    assert_eq!(p.key(), "v1:fwd:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1:g32");
    p.g = 1;
    assert_eq!(p.key(), "v1:fwd:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1");
}

#[test]
fn from_key_rejects_malformed_keys() {
    let good = "v1:fwd:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1";
    assert!(ConvProblem::from_key(good).is_ok());
    for bad in [
        "",
        "v2:fwd:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1",
        "v1:sideways:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1",
        "v1:fwd:f64:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1",
        "v1:fwd:f32:nchw:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1",
        "v1:fwd:f32:NCHW:n04:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1",
        "v1:fwd:f32:NCHW:n4:c64:k64:i28:f3x3:s1x1:p1x1:d1x1",
        "v1:fwd:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1:g1",
        "v1:fwd:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1:g3",
        "v1:fwd:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1",
        "v1:fwd:f32:NCHW:n4:c64:k64:i2x2:f3x3:s1x1:p0x0:d1x1",
        "v1:fwd:f32:NCHW:n99999999999:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1",
    ] {
        assert!(ConvProblem::from_key(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn validate_explains_each_rejection() {
    let reason = |p: ConvProblem| match p.validate() {
        Err(GconvError::InvalidProblem(m)) => m,
        other => panic!("expected a rejection, got {other:?}"),
    };
    assert!(reason(problem_2d(1, 6, 8, 4, 8, 3)).contains("C=6 is not divisible by G=4"));
    assert!(reason(problem_2d(1, 8, 6, 4, 8, 3)).contains("K=6 is not divisible by G=4"));
    assert!(reason(problem_2d(0, 8, 8, 1, 8, 3)).contains("N must be at least 1"));
    assert!(reason(problem_2d(1, 8, 8, 0, 8, 3)).contains("G must be at least 1"));
    assert!(reason(problem_2d(1, 8, 8, 1, 2, 3)).contains("output size along H is 0"));
    assert!(reason(problem_2d(1, 8, 8, 1, 0, 3)).contains("input size H"));
    let mut p = problem_2d(1, 8, 8, 1, 8, 3);
    p.dims[1].stride = 0;
    assert!(reason(p).contains("stride along W"));
    assert!(reason(problem_2d(1 << 20, 1 << 10, 8, 1, 64, 1)).contains("more than"));
    let mut p = problem_2d(1, 8, 8, 1, 8, 3);
    p.dims.clear();
    assert!(reason(p).contains("spatial rank"));
}

#[test]
fn reference_matches_hand_computed_values() {
    // 1D, one channel: x = [1 2 3 4], w = [1 10], pad 1, stride 2 -> y = [1*10, 2+3*10, 4].
    let mut p = ConvProblem {
        direction: Direction::Forward,
        dtype: DataType::F32,
        layout: Layout::Nchw,
        n: 1,
        c: 1,
        k: 1,
        g: 1,
        dims: vec![SpatialDim { input: 4, filter: 2, stride: 2, pad: 1, dilation: 1 }],
    };
    let x = Tensor::from_f32(DataType::F32, &[1.0, 2.0, 3.0, 4.0]);
    let w = Tensor::from_f32(DataType::F32, &[1.0, 10.0]);
    let dy = Tensor::from_f32(DataType::F32, &[1.0, 2.0, 3.0]);
    let t = ConvTensors { x, w, y: dy };
    assert_eq!(reference(&p, &t), vec![10.0, 32.0, 4.0]);
    p.direction = Direction::BackwardData;
    // dx[i] = sum over (o, f) with 2o + f - 1 = i of dy[o] w[f].
    assert_eq!(reference(&p, &t), vec![10.0, 2.0, 20.0, 3.0]);
    p.direction = Direction::BackwardWeight;
    // dw[f] = sum_o x[2o + f - 1] dy[o].
    assert_eq!(reference(&p, &t), vec![2.0 * 2.0 + 4.0 * 3.0, 1.0 + 3.0 * 2.0]);
}

#[test]
fn grouped_reference_keeps_groups_apart() {
    // Two groups of one channel, 1x1: each output channel sees only its own input channel.
    let mut p = problem_2d(1, 2, 2, 2, 1, 1);
    p.layout = Layout::Nhwc;
    let t = ConvTensors {
        x: Tensor::from_f32(DataType::F32, &[3.0, 5.0]),
        w: Tensor::from_f32(DataType::F32, &[2.0, 7.0]),
        y: Tensor::zeros(DataType::F32, 2),
    };
    assert_eq!(reference(&p, &t), vec![6.0, 35.0]);
}

#[test]
fn numbered_config_names_take_an_equals_sign() {
    let tag: Config = "eng22_k2=5_k13=1".parse().unwrap();
    assert_eq!(tag.fields()[0], ("eng".to_string(), 22));
    assert_eq!(tag.get("k13"), Some(1));
    assert_eq!(tag.to_string(), "eng22_k2=5_k13=1");
    for bad in ["eng=5", "k2=", "k2=05", "k=1", "2k=1", "eng22_k2=5_k2=6", "k2=-1"] {
        assert!(bad.parse::<Config>().is_err(), "{bad} parsed");
    }
}

const TILE: Schema = Schema::new(&[
    Field::new("th", Values::OneOf(&[4, 8])),
    Field::new("rb", Values::Range(1, 16)),
    Field::unless("tr", Values::OneOf(&[0, 1]), 0),
    Field::unless("db", Values::OneOf(&[0, 1]), 0),
]);

#[test]
fn a_schema_parses_and_prints_its_configs_and_lists_them_all() {
    let parse = |text: &str| TILE.parse::<4>(&text.parse().unwrap());
    assert_eq!(parse("th8_rb3").unwrap(), [8, 3, 0, 0]);
    assert_eq!(parse("th4_rb16_db1").unwrap(), [4, 16, 0, 1]);
    assert_eq!(TILE.print([4, 16, 0, 1]).to_string(), "th4_rb16_db1");
    assert_eq!(TILE.print([8, 3, 0, 0]).to_string(), "th8_rb3");
    for (text, why) in [
        ("th2_rb3", "th must be one of 4, 8"),
        ("th4_rb17", "rb must be from 1 to 16"),
        ("th4_rb1_tr0", "tr is left out where it is 0"),
        ("rb1_th4", "expected th<4|8>_rb<1..16>_tr<0|1>?_db<0|1>?"),
        ("th4_rb1_db1_tr1", "expected"),
        ("th4", "expected"),
        ("th4_rb1_xx1", "expected"),
    ] {
        let error = parse(text).unwrap_err().to_string();
        assert!(error.contains(why), "{text}: {error}");
    }
    const SMALL: Schema =
        Schema::new(&[Field::new("a", Values::OneOf(&[1, 2])), Field::unless("b", Values::OneOf(&[0, 5]), 0)]);
    assert_eq!(SMALL.all::<2>().collect::<Vec<_>>(), vec![[1, 0], [1, 5], [2, 0], [2, 5]]);
}
