//! MIOpenDriver's convolution flags, as MIOpen's driver/conv_driver.hpp defines them, turned
//! into gconv problems.

use std::process::ExitCode;

use clap::{Args, Parser};
use gconv_core::{ConvProblem, DataType, Direction, Layout, SpatialDim};

#[derive(Debug, Clone, Args)]
pub struct DriverArgs {
    /// Spatial dimensions: 1 (W), 2 (H, W) or 3 (D, H, W)
    #[arg(short = '_', long = "spatial_dim", default_value_t = 2)]
    pub spatial_dim: u32,
    /// Directions: 0 all, 1 fwd, 2 bwd-data, 4 bwd-weight, or a sum of them
    #[arg(short = 'F', long = "forw", default_value_t = 0)]
    pub forw: u32,
    /// Mini-batch size
    #[arg(short = 'n', long = "batchsize", default_value_t = 100)]
    pub batchsize: u32,
    /// Input channels
    #[arg(short = 'c', long = "in_channels", default_value_t = 3)]
    pub in_channels: u32,
    /// Input depth (3D)
    #[arg(short = '!', long = "in_d", default_value_t = 32)]
    pub in_d: u32,
    /// Input height
    #[arg(short = 'H', long = "in_h", default_value_t = 32)]
    pub in_h: u32,
    /// Input width
    #[arg(short = 'W', long = "in_w", default_value_t = 32)]
    pub in_w: u32,
    /// Output channels
    #[arg(short = 'k', long = "out_channels", default_value_t = 32)]
    pub out_channels: u32,
    /// Filter depth (3D)
    #[arg(short = '@', long = "fil_d", default_value_t = 3)]
    pub fil_d: u32,
    /// Filter height
    #[arg(short = 'y', long = "fil_h", default_value_t = 3)]
    pub fil_h: u32,
    /// Filter width
    #[arg(short = 'x', long = "fil_w", default_value_t = 3)]
    pub fil_w: u32,
    /// Stride along depth (3D)
    #[arg(short = '#', long = "conv_stride_d", default_value_t = 1)]
    pub conv_stride_d: u32,
    /// Stride along height
    #[arg(short = 'u', long = "conv_stride_h", default_value_t = 1)]
    pub conv_stride_h: u32,
    /// Stride along width
    #[arg(short = 'v', long = "conv_stride_w", default_value_t = 1)]
    pub conv_stride_w: u32,
    /// Zero padding along depth (3D)
    #[arg(short = '$', long = "pad_d", default_value_t = 0)]
    pub pad_d: u32,
    /// Zero padding along height
    #[arg(short = 'p', long = "pad_h", default_value_t = 0)]
    pub pad_h: u32,
    /// Zero padding along width
    #[arg(short = 'q', long = "pad_w", default_value_t = 0)]
    pub pad_w: u32,
    /// Dilation along depth (3D)
    #[arg(short = '^', long = "dilation_d", default_value_t = 1)]
    pub dilation_d: u32,
    /// Dilation along height
    #[arg(short = 'l', long = "dilation_h", default_value_t = 1)]
    pub dilation_h: u32,
    /// Dilation along width
    #[arg(short = 'j', long = "dilation_w", default_value_t = 1)]
    pub dilation_w: u32,
    /// Groups
    #[arg(short = 'g', long = "group_count", default_value_t = 1)]
    pub group_count: u32,
    /// Convolution mode: conv (transposed convolution is not supported)
    #[arg(short = 'm', long = "mode", default_value = "conv")]
    pub mode: String,
    /// Input layout: NCW, NCHW, NCDHW, NWC, NHWC or NDHWC (default NCHW-family)
    #[arg(short = 'I', long = "in_layout")]
    pub in_layout: Option<String>,
    /// Output layout; must match the input layout's family
    #[arg(short = 'O', long = "out_layout")]
    pub out_layout: Option<String>,
    /// Filter layout: NCHW-family is K x C/G x filter, NHWC-family is K x filter x C/G
    #[arg(short = 'f', long = "fil_layout")]
    pub fil_layout: Option<String>,
}

/// A driver line as it appears in a batch file, after its command word.
#[derive(Debug, Parser)]
#[command(
    name = "line",
    no_binary_name = true,
    allow_negative_numbers = true,
    args_override_self = true,
    disable_help_flag = true
)]
pub struct DriverLine {
    #[command(flatten)]
    pub driver: DriverArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

/// How to run each problem: MIOpenDriver's verify, time, iteration and solution flags.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Verify each direction against cpu.reference (1) or not (0)
    #[arg(short = 'V', long = "verify", default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1))]
    pub verify: u32,
    /// Time each direction (1): GPU time per call of back-to-back calls, the median of -i
    /// samples after one warm-up
    #[arg(short = 't', long = "time", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1))]
    pub time: u32,
    /// Samples (each a replay of enough back-to-back calls to last about a millisecond)
    #[arg(short = 'i', long = "iter", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub iter: u32,
    /// Force a solver by id (see `gconv explain`)
    #[arg(short = 'S', long = "solution")]
    pub solution: Option<String>,
    /// Run -S's solver with this config (as `gconv explain --configs` lists them) instead of
    /// its tuned or default one
    #[arg(long)]
    pub config: Option<String>,
}

impl DriverArgs {
    /// The problem of each direction selected by -F, in fwd, bwd-data, bwd-weight order.
    pub fn problems(&self, dtype: DataType) -> Result<Vec<ConvProblem>, String> {
        if self.mode != "conv" {
            return Err(format!("mode `{}` is not supported: only `conv` (transposed convolution is not)", self.mode));
        }
        if self.forw > 7 {
            return Err(format!(
                "-F {} is not a direction set: use 0 (all), 1 fwd, 2 bwd-data, 4 bwd-weight or a sum",
                self.forw
            ));
        }
        let rank = match self.spatial_dim {
            1..=3 => self.spatial_dim as usize,
            other => return Err(format!("--spatial_dim {other} is not supported: use 1, 2 or 3")),
        };
        let layout = self.layout(rank)?;
        let all = [
            SpatialDim {
                input: self.in_d,
                filter: self.fil_d,
                stride: self.conv_stride_d,
                pad: self.pad_d,
                dilation: self.dilation_d,
            },
            SpatialDim {
                input: self.in_h,
                filter: self.fil_h,
                stride: self.conv_stride_h,
                pad: self.pad_h,
                dilation: self.dilation_h,
            },
            SpatialDim {
                input: self.in_w,
                filter: self.fil_w,
                stride: self.conv_stride_w,
                pad: self.pad_w,
                dilation: self.dilation_w,
            },
        ];
        let base = ConvProblem {
            direction: Direction::Forward,
            dtype,
            layout,
            n: self.batchsize,
            c: self.in_channels,
            k: self.out_channels,
            g: self.group_count,
            dims: all[3 - rank..].to_vec(),
        };
        base.validate().map_err(|e| e.to_string())?;
        Ok(Direction::ALL
            .into_iter()
            .filter(|d| self.forw == 0 || self.forw & d.driver_bit() != 0)
            .map(|d| base.with_direction(d))
            .collect())
    }

    /// One layout family for all three tensors; names must fit the spatial rank.
    fn layout(&self, rank: usize) -> Result<Layout, String> {
        let mut family = None;
        for (flag, name) in [("-I", &self.in_layout), ("-O", &self.out_layout), ("-f", &self.fil_layout)] {
            let Some(name) = name else { continue };
            let (layout, named_rank) = Layout::parse_name(name).map_err(|e| format!("{flag}: {e}"))?;
            if named_rank != rank {
                return Err(format!(
                    "{flag} {name} is a {named_rank}D layout but --spatial_dim is {rank}: use {} or {}",
                    Layout::Nchw.name(rank),
                    Layout::Nhwc.name(rank)
                ));
            }
            match family {
                Some(f) if f != layout => {
                    return Err("mixed layouts are not supported: give -I, -O and -f the same family (all NCHW-like or all NHWC-like)".into())
                }
                _ => family = Some(layout),
            }
        }
        Ok(family.unwrap_or(Layout::Nchw))
    }
}

/// The data type a MIOpenDriver command word names.
pub fn command_dtype(word: &str) -> Option<DataType> {
    match word {
        "conv" => Some(DataType::F32),
        "convfp16" => Some(DataType::F16),
        "convbfp16" => Some(DataType::Bf16),
        _ => None,
    }
}

impl RunArgs {
    /// These settings as flags, so that a batch line's own flags can override them.
    fn as_flags(&self) -> Vec<String> {
        let mut flags = vec![
            "-V".into(),
            self.verify.to_string(),
            "-t".into(),
            self.time.to_string(),
            "-i".into(),
            self.iter.to_string(),
        ];
        if let Some(s) = &self.solution {
            flags.extend(["-S".into(), s.clone()]);
        }
        if let Some(c) = &self.config {
            flags.extend(["--config".into(), c.clone()]);
        }
        flags
    }
}

/// Parses one batch-file line: an optional program name (e.g. `./bin/MIOpenDriver`), an
/// optional command word that sets the data type, then flags. `defaults` (the command line's
/// run flags) apply unless the line sets its own.
pub fn parse_line(line: &str, default_dtype: DataType, defaults: &RunArgs) -> Result<(DataType, DriverLine), String> {
    let mut tokens: Vec<&str> = line.split_whitespace().collect();
    let command_at = tokens.iter().position(|t| t.starts_with('-') || command_dtype(t).is_some());
    let Some(start) = command_at else {
        return Err("no command word (conv, convfp16, convbfp16) or flags found".into());
    };
    tokens.drain(..start);
    let mut dtype = default_dtype;
    if let Some(d) = tokens.first().and_then(|t| command_dtype(t)) {
        dtype = d;
        tokens.remove(0);
    }
    let base = defaults.as_flags();
    let all = base.iter().map(String::as_str).chain(tokens);
    let parsed = DriverLine::try_parse_from(all).map_err(|e| first_line(&e.to_string()))?;
    Ok((dtype, parsed))
}

/// Clap's messages carry usage text after the first line; a batch report needs only the line.
pub fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string()
}

/// Where a batch of problems came from (`file:line` or `command line`), and the problems of
/// that origin with how to run them, or why the origin was rejected.
pub type Job = (String, Result<(Vec<ConvProblem>, RunArgs), String>);

/// With `allow` (`--allow-tf32`), fp32 problems become tf32 ones: their products may use TF32
/// tensor cores, and their results are kept apart from exact fp32 ones.
pub fn allowing_tf32(jobs: Vec<Job>, allow: bool) -> Vec<Job> {
    let convert = |mut p: ConvProblem| {
        if allow && p.dtype == DataType::F32 {
            p.dtype = DataType::Tf32;
        }
        p
    };
    jobs.into_iter()
        .map(|(origin, job)| (origin, job.map(|(problems, run)| (problems.into_iter().map(convert).collect(), run))))
        .collect()
}

/// Reads a batch file: driver lines (see [`parse_line`]) or problem keys, `#` comments.
pub fn jobs_from_file(path: &std::path::Path, default_dtype: DataType, defaults: &RunArgs) -> Result<Vec<Job>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, strip_comment(line).trim()))
        .filter(|(_, line)| !line.is_empty())
        .map(|(number, line)| {
            let job = if line.starts_with("v1:") {
                ConvProblem::from_key(line).map(|p| (vec![p], defaults.clone())).map_err(|e| e.to_string())
            } else {
                parse_line(line, default_dtype, defaults)
                    .and_then(|(dtype, parsed)| parsed.driver.problems(dtype).map(|p| (p, parsed.run)))
            };
            (format!("{}:{number}", path.display()), job)
        })
        .collect())
}

/// A line without its comment: `#` at the start or after white space begins one, so the
/// MIOpenDriver flag `-#` (depth stride) is not mistaken for a comment.
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let start = (0..bytes.len()).find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()));
    start.map_or(line, |i| &line[..i])
}

/// The run flags' defaults, for problems given by key.
pub fn default_run_args() -> RunArgs {
    DriverLine::try_parse_from(Vec::<&str>::new()).expect("defaults parse").run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Vec<ConvProblem>, String> {
        let (dtype, parsed) = parse_line(line, DataType::F32, &default_run_args())?;
        parsed.driver.problems(dtype)
    }

    #[test]
    fn miopen_driver_lines_parse_with_or_without_program_and_command() {
        let full = parse("./bin/MIOpenDriver convbfp16 -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -g 1 -F 1").unwrap();
        assert_eq!(full.len(), 1);
        assert_eq!(full[0].key(), "v1:fwd:bf16:NCHW:n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1");
        let bare = parse("-n 2 -c 4 -H 5 -W 5 -k 4 -F 6").unwrap();
        assert_eq!(
            bare.iter().map(|p| p.direction).collect::<Vec<_>>(),
            [Direction::BackwardData, Direction::BackwardWeight]
        );
        assert_eq!(bare[0].dtype, DataType::F32);
    }

    #[test]
    fn spatial_rank_selects_the_depth_and_width_flags() {
        let p3 = parse("conv --spatial_dim 3 -n 1 -c 2 -k 2 -! 5 -H 6 -W 7 -@ 1 -y 2 -x 3 -# 2 -$ 1 -^ 1 -F 1 -I NDHWC -O NDHWC -f NDHWC").unwrap();
        assert_eq!(p3[0].key(), "v1:fwd:f32:NDHWC:n1:c2:k2:i5x6x7:f1x2x3:s2x1x1:p1x0x0:d1x1x1");
        let p1 = parse("conv -_ 1 -n 1 -c 2 -k 2 -W 9 -x 3 -q 1 -v 2 -j 2 -F 4").unwrap();
        assert_eq!(p1[0].key(), "v1:bwd-weight:f32:NCW:n1:c2:k2:i9:f3:s2:p1:d2");
    }

    #[test]
    fn comments_start_at_a_free_standing_hash() {
        assert_eq!(strip_comment("conv -# 2 -u 1 # depth stride 2"), "conv -# 2 -u 1 ");
        assert_eq!(strip_comment("# whole line"), "");
        assert_eq!(strip_comment("conv -n 1"), "conv -n 1");
    }

    #[test]
    fn each_rejection_says_what_to_fix() {
        for (line, needle) in [
            ("frobnicate x", "no command word"),
            ("conv -n 2 -c 6 -g 4", "C=6 is not divisible by G=4"),
            ("conv -m trans", "mode `trans` is not supported"),
            ("conv -F 8", "-F 8 is not a direction set"),
            ("conv --spatial_dim 0", "--spatial_dim 0 is not supported"),
            ("conv -I NHWC -O NCHW", "mixed layouts are not supported"),
            ("conv -f NCW", "is a 1D layout but --spatial_dim is 2"),
            ("conv -I XYZ", "-I: unknown layout `XYZ`"),
            ("conv -H", "a value is required"),
            ("conv -H abc", "invalid value 'abc'"),
            ("conv --nope", "unexpected argument '--nope'"),
            ("conv -i 0", "invalid value '0'"),
        ] {
            let err = parse(line).expect_err(line);
            assert!(err.contains(needle), "{line}: `{needle}` not in `{err}`");
        }
    }
}

/// A file's problems, in another dtype or some directions only.
#[derive(Debug, Args)]
pub struct ProblemChoice {
    /// Run every problem in this data type instead of the file's
    #[arg(long, value_parser = ["f32", "f16", "bf16", "tf32"])]
    pub dtype: Option<String>,
    /// Directions to run, comma-separated (default: those of each line)
    #[arg(long, value_delimiter = ',', value_parser = ["fwd", "bwd-data", "bwd-weight"])]
    pub dir: Vec<String>,
}

impl ProblemChoice {
    /// The file's problems with the dtype and direction choices applied, each once, and the
    /// exit code of reading them (lines that are not problems are reported and skipped).
    pub fn problems(&self, file: &std::path::Path, tf32: bool) -> anyhow::Result<(Vec<ConvProblem>, ExitCode)> {
        let dtype = self.dtype.as_deref().map(|d| d.parse::<DataType>().map_err(anyhow::Error::msg)).transpose()?;
        let directions: Vec<gconv_core::Direction> =
            self.dir.iter().map(|d| d.parse().map_err(anyhow::Error::msg)).collect::<anyhow::Result<_>>()?;
        let mut problems: Vec<ConvProblem> = Vec::new();
        let jobs = jobs_from_file(file, DataType::F32, &default_run_args()).map_err(anyhow::Error::msg)?;
        let code = crate::commands::for_each_problem(allowing_tf32(jobs, tf32), |p, _| {
            let mut p = p.clone();
            if let Some(dtype) = dtype {
                p.dtype = dtype;
            }
            if (directions.is_empty() || directions.contains(&p.direction)) && !problems.contains(&p) {
                problems.push(p);
            }
            Ok(true)
        });
        Ok((problems, code))
    }
}
