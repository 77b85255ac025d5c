//! `cuda.igemm_tc` and `cuda.igemm_simt`: implicit GEMM for channels-last problems
//! (kernels/igemm.cu), every direction, groups in the grid. `igemm_tc` multiplies on tensor
//! cores with fp32 accumulation: 16-bit tiles by mma.sync m16n8k16, tf32 problems' fp32 tiles
//! rounded to TF32 by m16n8k8; `igemm_simt` is the same pipeline with fp32 FMAs, for fp32 and
//! tf32 data. The config space is the block tile (bm x bn x bk),
//! the warp grid (tensor cores), the cp.async pipeline depth and, for backward-weight, the
//! split of the pixel reduction (`ks`) and how slices are summed (`red`: 0 atomics into an
//! fp32 workspace, 1 one workspace slice each and a reduction kernel).

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute as FuncAttr;
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use gconv_core::{require, Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable, Result, Solve, Solver};

use crate::device::{backend_error, CudaDevice};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

const SOURCE: &str = include_str!("../kernels/igemm.cu");
/// Shared memory a block gets without opting in.
const DEFAULT_SHARED_BYTES: u32 = 48 * 1024;
/// The largest grid.y and grid.z.
const MAX_GRID_YZ: u64 = 65535;
const SPLITS: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const SPLIT_THREADS: u32 = 256;
/// Copies per operand, thread and stage.
const MAX_CHUNKS_PER_THREAD: u32 = 8;
/// Two-stage backward-weight keeps one fp32 copy of the weights per slice.
const MAX_WORKSPACE_BYTES: u64 = 1 << 30;
/// Gathered rows keep one bit per tap along each dimension: at most 21 in 64 bits.
const MAX_FILTER_TAPS: u32 = 21;
/// Registers an SM holds, and the shared memory the driver keeps per block.
const SM_REGISTERS: u32 = 64 * 1024;
const RESERVED_SHARED_BYTES: u32 = 1024;
/// Resident warps and blocks an SM holds at most.
const MAX_SM_WARPS: u32 = 64;
const MAX_SM_BLOCKS: u32 = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Math {
    /// mma.sync on fp16/bf16.
    TensorCores,
    /// fp32 FMA.
    Simt,
}

pub struct Igemm {
    pub device: Arc<CudaDevice>,
    plan: Planner,
}

impl Igemm {
    pub fn tensor_cores(device: Arc<CudaDevice>) -> Self {
        Igemm { plan: Planner::new(Math::TensorCores, &device), device }
    }

    pub fn simt(device: Arc<CudaDevice>) -> Self {
        Igemm { plan: Planner::new(Math::Simt, &device), device }
    }
}

/// The tile logic, apart from the GPU so that it can be tested without one: which tiles are
/// valid for a problem and which one to use by default.
#[derive(Debug, Clone, Copy)]
struct Planner {
    math: Math,
    sm_count: u32,
    max_shared_bytes: u32,
}

impl Planner {
    fn new(math: Math, device: &CudaDevice) -> Self {
        Planner { math, sm_count: device.sm_count, max_shared_bytes: device.max_shared_bytes }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tile {
    bm: u32,
    bn: u32,
    bk: u32,
    /// Warp grid (tensor cores); for SIMT each thread owns an 8x8 block of the tile.
    warps_m: u32,
    warps_n: u32,
    stages: u32,
    /// Backward-weight: slices of the pixel reduction, and whether they are summed by a
    /// separate kernel (two-stage) rather than by atomics.
    splits: u32,
    two_stage: bool,
}

/// The problem as the kernel's GEMM sees it, per group.
struct Shape {
    /// GEMM rows (of the largest phase for bwd-data).
    m: u64,
    /// GEMM columns (taps x Cg for bwd-weight).
    n: u64,
    /// Filter taps.
    taps: u64,
    /// Channels reduced per tap (fwd/bwd-data) or pixels reduced (bwd-weight).
    reduce: u64,
    /// Sub-pixel phases of bwd-data; 1 otherwise.
    phases: u64,
    groups: u64,
}

impl Shape {
    fn new(p: &ConvProblem) -> Self {
        let (cg, kg) = (u64::from(p.c / p.g), u64::from(p.k / p.g));
        let taps: u64 = p.dims.iter().map(|d| u64::from(d.filter)).product();
        let n = u64::from(p.n);
        let output: u64 = p.output_dims().iter().map(|&o| u64::from(o)).product();
        let groups = u64::from(p.g);
        match p.direction {
            Direction::Forward => Shape { m: n * output, n: kg, taps, reduce: cg, phases: 1, groups },
            Direction::BackwardData => {
                let per_phase: u64 = p.dims.iter().map(|d| u64::from(d.input.div_ceil(d.stride))).product();
                let phases = p.dims.iter().map(|d| u64::from(d.stride)).product();
                Shape { m: n * per_phase, n: cg, taps, reduce: kg, phases, groups }
            }
            Direction::BackwardWeight => Shape { m: kg, n: taps * cg, taps, reduce: n * output, phases: 1, groups },
        }
    }

    /// The launch grid of a tile: row tiles, column tiles, groups x phases x slices.
    fn grid(&self, t: &Tile) -> (u64, u64, u64) {
        (self.m.div_ceil(u64::from(t.bm)), self.n.div_ceil(u64::from(t.bn)), self.groups * self.phases * u64::from(t.splits))
    }
}

fn elem_bytes(dtype: DataType) -> u32 {
    dtype.size_bytes() as u32
}

/// Elements per global->shared copy of each operand (A, B): the widest power of two up to 16
/// bytes that divides the operand's contiguous channel count, so a copy never straddles a
/// group or a pixel.
fn copy_widths(p: &ConvProblem) -> (u32, u32) {
    let (cg, kg) = (p.c / p.g, p.k / p.g);
    let max = 16 / elem_bytes(p.dtype);
    let width = |channels: u32| [8u32, 4, 2, 1].into_iter().find(|&w| w <= max && channels.is_multiple_of(w)).unwrap_or(1);
    let a = if p.direction == Direction::Forward { cg } else { kg };
    (width(a), width(cg))
}

fn direction_code(d: Direction) -> u32 {
    match d {
        Direction::Forward => 0,
        Direction::BackwardData => 1,
        Direction::BackwardWeight => 2,
    }
}

impl Tile {
    fn threads(&self) -> u32 {
        self.warps_m * self.warps_n * 32
    }

    /// Copies per thread and stage of each operand.
    fn chunks_per_thread(&self, p: &ConvProblem) -> (u32, u32) {
        let (width_a, width_b) = copy_widths(p);
        let chunks = |rows: u32, width: u32| (rows * self.bk / width).div_ceil(self.threads());
        (chunks(self.bm, width_a), chunks(self.bn, width_b))
    }

    /// Blocks per SM the kernel is built for (`__launch_bounds__`). Left to itself the compiler
    /// takes a few registers over 128 and so holds a 256-thread tile to one block per SM. Where
    /// the loader is light (16-byte copies, few of them: a local NVRTC sweep of the space
    /// found no spills there), threads get 128 registers when their accumulators fit, and
    /// shared memory sets the count; elsewhere the compiler is left free.
    fn min_blocks(&self, plan: &Planner, p: &ConvProblem) -> u32 {
        let (chunks_a, chunks_b) = self.chunks_per_thread(p);
        let widest = 16 / elem_bytes(p.dtype);
        let max_chunks = if p.direction == Direction::BackwardWeight { 4 } else { 6 };
        let accumulators = self.bm / self.warps_m * (self.bn / self.warps_n) / 32;
        let light = plan.math == Math::TensorCores
            && copy_widths(p) == (widest, widest)
            && chunks_a + chunks_b <= max_chunks
            && accumulators <= 64;
        if !light {
            return 1;
        }
        let by_registers = SM_REGISTERS / (self.threads() * 128);
        let by_shared = (plan.max_shared_bytes + RESERVED_SHARED_BYTES) / (self.shared_bytes(p) + RESERVED_SHARED_BYTES);
        by_registers.min(by_shared).max(1)
    }

    fn shared_bytes(&self, p: &ConvProblem) -> u32 {
        let pad = 16 / elem_bytes(p.dtype);
        let (a_kmajor, b_kmajor) = match p.direction {
            Direction::Forward => (true, true),
            Direction::BackwardData => (true, false),
            Direction::BackwardWeight => (false, false),
        };
        let a = if a_kmajor { self.bm * (self.bk + pad) } else { self.bk * (self.bm + pad) };
        let b = if b_kmajor { self.bn * (self.bk + pad) } else { self.bk * (self.bn + pad) };
        self.stages * (a + b) * elem_bytes(p.dtype)
    }

    /// How the kernel writes results: 0 into the output; split backward-weight 1 by atomics
    /// into the fp32 workspace, 2 into its slice of the workspace.
    fn out_mode(&self, p: &ConvProblem) -> u32 {
        match (p.direction, self.splits, self.two_stage) {
            (Direction::BackwardWeight, 2.., false) => 1,
            (Direction::BackwardWeight, 2.., true) => 2,
            _ => 0,
        }
    }

    fn workspace_bytes(&self, p: &ConvProblem) -> u64 {
        match (p.direction, self.splits, self.two_stage) {
            (Direction::BackwardWeight, 2.., false) => p.weight_elements() * 4,
            (Direction::BackwardWeight, 2.., true) => p.weight_elements() * 4 * u64::from(self.splits),
            _ => 0,
        }
    }

    fn to_config(self, math: Math, direction: Direction) -> Config {
        let mut fields = vec![("bm", self.bm), ("bn", self.bn), ("bk", self.bk)];
        if math == Math::TensorCores {
            fields.extend([("wm", self.warps_m), ("wn", self.warps_n)]);
        }
        fields.push(("st", self.stages));
        if direction == Direction::BackwardWeight {
            fields.extend([("ks", self.splits), ("red", u32::from(self.two_stage))]);
        }
        Config::new(fields)
    }

    fn from_config(plan: &Planner, p: &ConvProblem, config: &Config) -> Result<Self> {
        let bad = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        let weight = p.direction == Direction::BackwardWeight;
        let field_count = 4 + if plan.math == Math::TensorCores { 2 } else { 0 } + if weight { 2 } else { 0 };
        if config.fields().len() != field_count {
            return Err(bad(format!("expected {field_count} fields, as in `{}`", plan.default_tile(p).to_config(plan.math, p.direction))));
        }
        let field = |name: &str| config.get(name).ok_or_else(|| bad(format!("missing field `{name}`")));
        let (bm, bn, bk, stages) = (field("bm")?, field("bn")?, field("bk")?, field("st")?);
        let (warps_m, warps_n) = match plan.math {
            Math::TensorCores => (field("wm")?, field("wn")?),
            // 8x8 outputs per thread, threads counted in warps.
            Math::Simt => ((bm / 8 * (bn / 8)).div_ceil(32), 1),
        };
        let (splits, two_stage) = if weight { (field("ks")?, field("red")? == 1) } else { (1, false) };
        if weight && field("red")? > 1 {
            return Err(bad("red must be 0 (atomics) or 1 (two-stage)".into()));
        }
        let tile = Tile { bm, bn, bk, warps_m, warps_n, stages, splits, two_stage };
        tile.check(plan, p).map_err(bad)?;
        Ok(tile)
    }

    /// Why the tile cannot run the problem, if it cannot.
    fn check(&self, plan: &Planner, p: &ConvProblem) -> std::result::Result<(), String> {
        let shape = Shape::new(p);
        match plan.math {
            Math::TensorCores => {
                if ![32, 64, 128, 256].contains(&self.bm) || ![16, 32, 64, 128, 256].contains(&self.bn) {
                    return Err("bm must be one of 32..256 and bn one of 16..256, powers of two".into());
                }
                if ![16, 32, 64].contains(&self.bk) {
                    return Err("bk must be 16, 32 or 64".into());
                }
                if ![1, 2, 4].contains(&self.warps_m) || ![1, 2, 4].contains(&self.warps_n) || self.threads() > 256 {
                    return Err("wm and wn must be 1, 2 or 4, at most 8 warps in all".into());
                }
                let (wm, wn) = (self.bm / self.warps_m, self.bn / self.warps_n);
                if wm % 16 != 0 || wn % 16 != 0 || wm * wn > 64 * 64 {
                    return Err(format!("warp tile {wm}x{wn} must be multiples of 16, at most 64x64"));
                }
            }
            Math::Simt => {
                if ![64, 128].contains(&self.bm) || ![64, 128].contains(&self.bn) {
                    return Err("bm and bn must be 64 or 128".into());
                }
                if ![8, 16, 32].contains(&self.bk) {
                    return Err("bk must be 8, 16 or 32".into());
                }
            }
        }
        // Copy loops unroll, and gathered rows keep their pixel coordinates in registers: a
        // thread copies at most a few chunks of each operand per stage.
        let (chunks_a, chunks_b) = self.chunks_per_thread(p);
        if chunks_a.max(chunks_b) > MAX_CHUNKS_PER_THREAD {
            return Err(format!(
                "each thread would copy {chunks_a} chunks of A and {chunks_b} of B, {MAX_CHUNKS_PER_THREAD} at most: use a smaller tile"
            ));
        }
        if ![2, 3, 4].contains(&self.stages) {
            return Err("st (pipeline stages) must be 2, 3 or 4".into());
        }
        let shared = self.shared_bytes(p);
        if shared > plan.max_shared_bytes {
            return Err(format!("needs {shared} bytes of shared memory, the GPU has {}", plan.max_shared_bytes));
        }
        if !SPLITS.contains(&self.splits) {
            return Err(format!("ks must be one of {SPLITS:?}"));
        }
        let (_, y, z) = shape.grid(self);
        if z > MAX_GRID_YZ || y > MAX_GRID_YZ {
            return Err("the grid would exceed 65535 blocks in y or z".into());
        }
        if self.workspace_bytes(p) > MAX_WORKSPACE_BYTES {
            return Err(format!("{} slices of fp32 weights would need more than {} MiB of workspace", self.splits, MAX_WORKSPACE_BYTES >> 20));
        }
        Ok(())
    }

    fn source(&self, plan: &Planner, p: &ConvProblem) -> KernelSource {
        let src = KernelSource::new("igemm.cu", SOURCE, p.dtype)
            .define("DIR", direction_code(p.direction))
            .define("BM", self.bm)
            .define("BN", self.bn)
            .define("BK", self.bk)
            .define("THREADS", self.threads())
            .define("STAGES", self.stages)
            .define("CPW_A", copy_widths(p).0)
            .define("CPW_B", copy_widths(p).1)
            .define("OUT_MODE", self.out_mode(p))
            .define("TAP_BITS", if p.dims.iter().all(|d| d.filter <= 10) { 10 } else { MAX_FILTER_TAPS })
            .define("MIN_BLOCKS", self.min_blocks(plan, p));
        match plan.math {
            Math::TensorCores => src.define("TC", 1).define("WARPS_M", self.warps_m).define("WARPS_N", self.warps_n),
            Math::Simt => src.define("TC", 0),
        }
    }
}

impl Planner {
    /// The share of L1 to give shared memory: enough for as many blocks as registers and
    /// warp slots allow, and no more, as the rest caches the loads that bypass shared memory.
    fn carveout_percent(&self, threads: u32, registers: u32, shared: u32) -> u32 {
        let warps = threads.div_ceil(32);
        let by_registers = SM_REGISTERS / (warps * 32 * registers.next_multiple_of(8)).max(1);
        let sm_shared = self.max_shared_bytes + RESERVED_SHARED_BYTES;
        let by_shared = sm_shared / (shared + RESERVED_SHARED_BYTES);
        let blocks = by_registers.min(by_shared).min(MAX_SM_WARPS / warps).clamp(1, MAX_SM_BLOCKS);
        (blocks * (shared + RESERVED_SHARED_BYTES) * 100).div_ceil(sm_shared).min(100)
    }

    /// Every tile shape of the config space, before the problem's own checks.
    fn candidate_tiles(&self) -> Vec<Tile> {
        let base = Tile { bm: 0, bn: 0, bk: 0, warps_m: 1, warps_n: 1, stages: 0, splits: 1, two_stage: false };
        let mut tiles = Vec::new();
        match self.math {
            Math::TensorCores => {
                for bm in [32, 64, 128, 256] {
                    for bn in [16, 32, 64, 128, 256] {
                        for bk in [16, 32, 64] {
                            for (warps_m, warps_n) in [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (2, 4)] {
                                for stages in [2, 3, 4] {
                                    tiles.push(Tile { bm, bn, bk, warps_m, warps_n, stages, ..base });
                                }
                            }
                        }
                    }
                }
            }
            Math::Simt => {
                for bm in [64, 128] {
                    for bn in [64, 128] {
                        for bk in [8, 16, 32] {
                            for stages in [2, 3] {
                                tiles.push(Tile { bm, bn, bk, warps_m: bm / 8 * (bn / 8) / 32, stages, ..base });
                            }
                        }
                    }
                }
            }
        }
        tiles
    }

    /// The valid tile with the least estimated time: SMs run `ceil(blocks / SMs)` tiles each,
    /// each of its reduction steps plus a fixed pipeline fill and epilogue, at a speed set by
    /// the warp tile's operand reuse and by how many warps they keep busy. Padding waste shows
    /// in `bm x bn` against the problem's rows and columns.
    fn default_tile(&self, p: &ConvProblem) -> Tile {
        let shape = Shape::new(p);
        let sms = u64::from(self.sm_count);
        let weight = p.direction == Direction::BackwardWeight;
        let bk = match self.math {
            // Backward-weight gathers both operands through per-chunk pixel cursors: shallow
            // tiles keep a thread's chunks, and its registers, few (tuning on the GPU agrees).
            Math::TensorCores if weight || shape.reduce <= 16 => 16,
            Math::TensorCores => 32,
            // Narrow copies mean more gathered rows per thread: a shallower tile.
            Math::Simt if copy_widths(p).0 < 4 => 8,
            Math::Simt => 16,
        };
        let base = Tile { bm: 0, bn: 0, bk, warps_m: 1, warps_n: 1, stages: 3, splits: 1, two_stage: false };
        let mut candidates = Vec::new();
        match self.math {
            Math::TensorCores => {
                for bm in [256, 128, 64, 32] {
                    for bn in [128, 64, 32, 16] {
                        // Four warps (eight for the tallest tile), warp tiles 16 to 64 wide.
                        let warps_n = (bn / 16).min(2);
                        let warps_m = ((if bm == 256 { 8 } else { 4 }) / warps_n).min(bm / 16);
                        candidates.push(Tile { bm, bn, warps_m, warps_n, ..base });
                    }
                }
            }
            Math::Simt => {
                for bm in [128, 64] {
                    for bn in [128, 64] {
                        candidates.push(Tile { bm, bn, warps_m: bm / 8 * (bn / 8) / 32, ..base });
                    }
                }
            }
        }
        let k_tiles = shape.reduce.div_ceil(u64::from(bk));
        let splits: Vec<u32> = if weight {
            // Each slice keeps at least 8 reduction tiles.
            SPLITS.into_iter().filter(|&s| s == 1 || u64::from(s) * 8 <= k_tiles).collect()
        } else {
            vec![1]
        };
        let cost = |t: &Tile| {
            let (x, y, z) = shape.grid(t);
            let blocks = x * y * z;
            let per_sm = blocks.div_ceil(sms) as f64;
            let (warp_m, warp_n, resident) = match self.math {
                Math::TensorCores => {
                    let (wm, wn) = (f64::from(t.bm / t.warps_m), f64::from(t.bn / t.warps_n));
                    (wm, wn, if wm * wn >= 4096.0 { 2.0 } else if wm * wn >= 2048.0 { 3.0 } else { 4.0 })
                }
                Math::Simt => (64.0, 64.0, f64::from(256 / t.threads()).max(1.0)),
            };
            // Shared-memory traffic per mma falls with the warp tile's rows x columns over
            // their sum; 64x64 is the reference.
            let reuse = warp_m * warp_n / (warp_m + warp_n) / 32.0;
            let busy = (per_sm.min(resident) * f64::from(t.threads() / 32) / 8.0).min(1.0);
            // Reduction steps per block, plus about six steps' worth of pipeline fill and
            // epilogue, which short reductions (and many slices) pay for.
            let steps = if weight {
                k_tiles.div_ceil(u64::from(t.splits))
            } else {
                (shape.taps / shape.phases).max(1) * shape.reduce.div_ceil(u64::from(t.bk))
            };
            per_sm * f64::from(t.bm * t.bn) * (steps as f64 + 6.0) / (reuse * busy)
        };
        candidates
            .into_iter()
            .flat_map(|t| splits.iter().map(move |&splits| Tile { splits, ..t }))
            .filter(|t| t.check(self, p).is_ok())
            .min_by(|a, b| cost(a).total_cmp(&cost(b)))
            .unwrap_or(Tile { bm: 64, bn: 64, warps_m: 2, warps_n: 2, ..base })
    }
}

impl Solver for Igemm {
    fn id(&self) -> &'static str {
        match self.plan.math {
            Math::TensorCores => "cuda.igemm_tc",
            Math::Simt => "cuda.igemm_simt",
        }
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        require!(p.layout == Layout::Nhwc, "implicit GEMM here reads channels-last (NHWC) tensors only");
        match self.plan.math {
            Math::TensorCores => require!(p.dtype != DataType::F32, "exact fp32 runs on cuda.igemm_simt (tf32, from --allow-tf32, may use tensor cores)"),
            Math::Simt => require!(p.dtype.storage() == DataType::F32, "16-bit types run on tensor cores (cuda.igemm_tc)"),
        }
        let (major, minor) = self.device.capability;
        require!(major >= 8, "needs cp.async and mma.sync (sm_80 or newer), the GPU is sm_{major}{minor}");
        require!(
            p.dims.iter().all(|d| d.filter <= MAX_FILTER_TAPS),
            "filters longer than {MAX_FILTER_TAPS} taps along a dimension are not supported"
        );
        let tile = self.plan.default_tile(p);
        tile.check(&self.plan, p).map_err(NotApplicable)?;
        Ok(())
    }

    fn workspace_bytes(&self, p: &ConvProblem, config: &Config) -> u64 {
        Tile::from_config(&self.plan, p, config).map_or(0, |t| t.workspace_bytes(p))
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        self.plan.default_tile(p).to_config(self.plan.math, p.direction)
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        let splits: Vec<(u32, bool)> = if p.direction == Direction::BackwardWeight {
            SPLITS.into_iter().flat_map(|s| [(s, false), (s, true)]).filter(|&(s, two)| s > 1 || !two).collect()
        } else {
            vec![(1, false)]
        };
        let tiles = self.plan.candidate_tiles().into_iter().flat_map(move |t| {
            splits.clone().into_iter().map(move |(splits, two_stage)| Tile { splits, two_stage, ..t })
        });
        Box::new(tiles.filter(move |t| t.check(&self.plan, p).is_ok()).map(move |t| t.to_config(self.plan.math, p.direction)))
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        Tile::from_config(&self.plan, p, config).map(|_| ())
    }

    fn needs_build(&self, p: &ConvProblem, config: &Config) -> bool {
        Tile::from_config(&self.plan, p, config).map_or(true, |t| !self.device.is_built(&t.source(&self.plan, p)))
    }

    fn prepare(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        self.device.precompile(&Tile::from_config(&self.plan, p, config)?.source(&self.plan, p))
    }
}

impl Solve<Cuda> for Igemm {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let tile = Tile::from_config(&self.plan, p, config)?;
        let src = tile.source(&self.plan, p);
        let main = self.device.function(&src, "igemm")?;
        let shared = tile.shared_bytes(p);
        if shared > DEFAULT_SHARED_BYTES {
            main.set_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared as i32)
                .map_err(|e| backend_error("allow cuda.igemm's shared memory", e))?;
        }
        let registers = main
            .get_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_NUM_REGS)
            .map_err(|e| backend_error("read cuda.igemm's register count", e))?;
        let carveout = self.plan.carveout_percent(tile.threads(), registers as u32, shared);
        main.set_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout as i32)
            .map_err(|e| backend_error("set cuda.igemm's shared-memory carveout", e))?;
        let shape = Shape::new(p);
        let (x, y, z) = shape.grid(&tile);
        let launch = LaunchConfig {
            grid_dim: (x as u32, y as u32, z as u32),
            block_dim: (tile.threads(), 1, 1),
            shared_mem_bytes: shared,
        };
        let split = match (p.direction, tile.splits) {
            (Direction::BackwardWeight, 2..) => {
                let weights = p.weight_elements();
                Some(Split {
                    zero: (!tile.two_stage).then(|| self.device.function(&src, "igemm_zero")).transpose()?,
                    reduce: self.device.function(&src, "igemm_reduce")?,
                    slices: if tile.two_stage { tile.splits as i32 } else { 1 },
                    count: weights as i32,
                    blocks: (weights.div_ceil(u64::from(SPLIT_THREADS)) as u32).clamp(1, self.device.sm_count * 8),
                })
            }
            _ => None,
        };
        // Blocks of one group, told apart by phase or slice.
        let zdim = (z / shape.groups) as i32;
        Ok(Box::new(IgemmInvoker { main, params: ConvParams::new(p), direction: p.direction, launch, zdim, split }))
    }
}

/// Backward-weight with more than one slice: zero the workspace (atomics) and reduce it.
struct Split {
    zero: Option<CudaFunction>,
    reduce: CudaFunction,
    slices: i32,
    count: i32,
    blocks: u32,
}

struct IgemmInvoker {
    main: CudaFunction,
    params: ConvParams,
    direction: Direction,
    launch: LaunchConfig,
    zdim: i32,
    split: Option<Split>,
}

impl Invoker<Cuda> for IgemmInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let launch_err = |e| backend_error("launch cuda.igemm", e);
        let (a, bm, out) = match self.direction {
            Direction::Forward => (b.x, b.w, b.y),
            Direction::BackwardData => (b.y, b.w, b.x),
            Direction::BackwardWeight => (b.y, b.x, b.w),
        };
        let flat = |blocks| LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (SPLIT_THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY (every launch): the arguments match the kernels' signatures; the pointers
        // come from buffers sized for this problem, the workspace included.
        if let Some(Split { zero: Some(zero), count, blocks, .. }) = &self.split {
            let mut l = b.stream.launch_builder(zero);
            l.arg(&b.workspace).arg(count);
            unsafe { l.launch(flat(*blocks)) }.map_err(launch_err)?;
        }
        let mut l = b.stream.launch_builder(&self.main);
        l.arg(&self.params).arg(&a).arg(&bm).arg(&out).arg(&b.workspace).arg(&self.zdim);
        unsafe { l.launch(self.launch) }.map_err(launch_err)?;
        if let Some(Split { reduce, slices, count, blocks, .. }) = &self.split {
            let mut l = b.stream.launch_builder(reduce);
            l.arg(&b.workspace).arg(slices).arg(count).arg(&out);
            unsafe { l.launch(flat(*blocks)) }.map_err(launch_err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gconv_core::testing::small_problem;
    use proptest::prelude::*;

    use super::*;

    /// An H100's limits: the tile logic needs no GPU.
    fn planner(math: Math) -> Planner {
        Planner { math, sm_count: 132, max_shared_bytes: 227 * 1024 }
    }

    /// The maths that run the problem: tf32 runs on both.
    fn maths_of(p: &ConvProblem) -> Vec<Math> {
        match p.dtype {
            DataType::F32 => vec![Math::Simt],
            DataType::Tf32 => vec![Math::Simt, Math::TensorCores],
            _ => vec![Math::TensorCores],
        }
    }

    #[test]
    fn carveout_fits_the_blocks_registers_allow() {
        let plan = planner(Math::TensorCores);
        // 256 threads of a 76.8 KB tile: two blocks at 126 registers, one at 155.
        assert_eq!(plan.carveout_percent(256, 126, 76800), 67);
        assert_eq!(plan.carveout_percent(256, 155, 76800), 34);
        // Small tiles stop at the SM's warp slots; without shared memory only the driver's
        // reserve per block is asked for.
        assert_eq!(plan.carveout_percent(32, 32, 4096), 71);
        assert_eq!(plan.carveout_percent(128, 64, 0), 4);
    }

    fn check_default(plan: &Planner, p: &ConvProblem) {
        let tile = plan.default_tile(p);
        assert_eq!(tile.check(plan, p), Ok(()), "default {tile:?} of {}", p.key());
        let config = tile.to_config(plan.math, p.direction);
        assert_eq!(Tile::from_config(plan, p, &config).unwrap(), tile, "{config} of {}", p.key());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn defaults_and_the_config_space_are_valid(p in small_problem().prop_filter("NHWC", |p| p.layout == Layout::Nhwc)) {
            for math in maths_of(&p) {
                let plan = planner(math);
                check_default(&plan, &p);
                let mut count = 0;
                for tile in plan.candidate_tiles().into_iter().filter(|t| t.check(&plan, &p).is_ok()) {
                    let config = tile.to_config(plan.math, p.direction);
                    prop_assert_eq!(Tile::from_config(&plan, &p, &config).unwrap(), tile);
                    count += 1;
                }
                prop_assert!(count > 0, "no valid tile for {}", p.key());
            }
        }
    }

    #[test]
    fn real_layers_get_valid_defaults() {
        let shapes = [
            "n32:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1",
            "n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32",
            "n32:c512:k512:i7x7:f3x3:s1x1:p1x1:d1x1",
            "n32:c1024:k2048:i14x14:f1x1:s2x2:p0x0:d1x1",
            "n32:c3:k64:i16x112x112:f3x7x7:s1x2x2:p1x3x3:d1x1x1",
            "n32:c960:k960:i7x7:f5x5:s1x1:p2x2:d1x1:g960",
        ];
        for shape in shapes {
            for direction in ["fwd", "bwd-data", "bwd-weight"] {
                for dtype in ["bf16", "f16", "f32", "tf32"] {
                    let layout = if shape.matches('x').count() > 6 { "NDHWC" } else { "NHWC" };
                    let p = ConvProblem::from_key(&format!("v1:{direction}:{dtype}:{layout}:{shape}")).unwrap();
                    for math in maths_of(&p) {
                        check_default(&planner(math), &p);
                    }
                }
            }
        }
    }

    #[test]
    fn bad_configs_say_why() {
        let p = ConvProblem::from_key("v1:bwd-weight:bf16:NHWC:n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1").unwrap();
        let plan = planner(Math::TensorCores);
        let reason = |text: &str| match Tile::from_config(&plan, &p, &text.parse().unwrap()) {
            Err(GconvError::BadConfig { reason, .. }) => reason,
            other => panic!("{text}: expected a bad config, got {other:?}"),
        };
        assert!(reason("bm64_bn64_bk32_wm2_wn2_st3").contains("expected 8 fields"));
        assert!(reason("bm48_bn64_bk32_wm2_wn2_st3_ks1_red0").contains("bm must be"));
        assert!(reason("bm64_bn64_bk32_wm2_wn2_st3_ks4_red2").contains("red must be"));
        assert!(reason("bm128_bn128_bk32_wm1_wn1_st3_ks1_red0").contains("warp tile"));
        let small_gpu = Planner { max_shared_bytes: 99 * 1024, ..plan };
        let config = "bm256_bn128_bk64_wm4_wn2_st4_ks1_red0".parse().unwrap();
        assert!(Tile::from_config(&plan, &p, &config).is_ok());
        assert!(matches!(Tile::from_config(&small_gpu, &p, &config), Err(GconvError::BadConfig { reason, .. }) if reason.contains("shared memory")));
        assert!(reason("bm64_bn64_bk32_wm2_wn2_st3_ks3_red0").contains("ks must be"));
        assert!(Tile::from_config(&plan, &p, &"bm64_bn64_bk32_wm2_wn2_st3_ks16_red1".parse().unwrap()).is_ok());
    }
}
