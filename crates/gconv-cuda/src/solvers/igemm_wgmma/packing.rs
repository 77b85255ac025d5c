//! Packing decisions: when a layer runs with its taps or groups packed, and how its filter is
//! read.

use super::geometry::*;
use super::space::*;
use super::tile::*;
use super::*;

/// How `p` runs as another layer, where its channels (per group) are too few for TMA rows:
/// its taps along W packed into the channels (see tap_packing), or its groups into blocks of a
/// row's channels (see group_packing).
pub(super) enum Packed {
    Taps(Packing),
    Groups(GroupPacking),
}

impl Packed {
    pub(super) fn of(p: &ConvProblem) -> Option<Packed> {
        let row = row_elements(p.dtype);
        Packing::of(p, row).map(Packed::Taps).or_else(|| GroupPacking::of(p, row).map(Packed::Groups))
    }

    /// The layer the products run.
    pub(super) fn layer(&self) -> &ConvProblem {
        match self {
            Packed::Taps(packing) => &packing.packed,
            Packed::Groups(packing) => &packing.packed,
        }
    }

    /// Why the packed layer does not apply, in terms of `p`: a blocked layer's channel counts
    /// are not the user's.
    pub(super) fn explain(&self, reason: NotApplicable) -> NotApplicable {
        match self {
            Packed::Taps(_) => reason,
            Packed::Groups(packing) => {
                let layer = &packing.packed;
                NotApplicable(format!(
                    "its groups blocked {} at a time (as {} groups of {} input channels): {reason}",
                    packing.blocked(),
                    layer.g,
                    layer.c_per_group()
                ))
            }
        }
    }

    /// Whether the products take the user's tensors themselves, with no kernel around them:
    /// a blocked layer's backward-weight keeps the diagonal blocks of its gradient as it
    /// stores them (see the kernel's group_kg), and its forward and backward-data where they
    /// read the blocked filter from w (see the kernel's FilterBlocks; `held`: the products'
    /// tile holds the filter's stages across units).
    pub(super) fn in_place(&self, held: bool) -> bool {
        matches!(self, Packed::Groups(packing) if packing.packed.direction == Direction::BackwardWeight || packing.reads_user_filter(held))
    }

    pub(super) fn workspace_bytes(&self, inner: u64) -> u64 {
        match self {
            Packed::Taps(packing) => packing.workspace_bytes(inner),
            Packed::Groups(packing) => packing.workspace_bytes(inner),
        }
    }

    pub(super) fn source(&self, dtype: DataType) -> KernelSource {
        match self {
            Packed::Taps(_) => tap_packing::source(dtype),
            Packed::Groups(_) => group_packing::source(dtype),
        }
    }

    pub(super) fn invoker(
        self,
        device: &CudaDevice,
        dtype: DataType,
        inner: Box<dyn Invoker<Cuda>>,
        inner_workspace: u64,
    ) -> Result<Box<dyn Invoker<Cuda>>> {
        Ok(match self {
            Packed::Taps(packing) => Box::new(packing.invoker(device, dtype, inner, inner_workspace)?),
            Packed::Groups(packing) => Box::new(packing.invoker(device, inner, inner_workspace)?),
        })
    }
}

/// A group's channels where `user`'s blocked filter is written by the helper warps of the
/// products' `tile` (the kernel's FILL_FILTER).
pub(super) fn filled_filter(user: &ConvProblem, tile: Tile) -> Option<u32> {
    match Packed::of(user)? {
        Packed::Groups(packing) if packing.fills_filter(tile.writes_held_filter()) => Some(user.c_per_group()),
        _ => None,
    }
}

/// A group's channels where `user`'s blocked filter's MMAs skip its zeros (the kernel's
/// DIAGONAL, on 64-column tiles).
pub(super) fn diagonal(user: &ConvProblem, tile: Tile) -> Option<u32> {
    match Packed::of(user)? {
        Packed::Groups(packing) if tile.bn == 64 => packing.diagonal(),
        _ => None,
    }
}

/// Whether `config` on `layer` may write a blocked filter held across units (see
/// Tile::writes_held_filter).
pub(super) fn writes_held_filter(layer: &ConvProblem, config: &Config) -> bool {
    WgmmaConfig::from_config(layer, config).is_ok_and(|config| config.tile.writes_held_filter())
}

/// The layer the products run: `p`, or its packed layer.
pub(super) fn lowered(p: &ConvProblem) -> Cow<'_, ConvProblem> {
    Packed::of(p).map_or(Cow::Borrowed(p), |packed| Cow::Owned(packed.layer().clone()))
}

/// Whether backward-data reads the filter straight from w as an MN-major B (16-bit types),
/// rather than a flipped and transposed copy (tf32, whose wgmma takes K-major operands only).
pub(super) fn reads_filter_directly(p: &ConvProblem) -> bool {
    p.direction == Direction::BackwardData && p.dtype != DataType::Tf32
}

/// Backward-data's workspace: the split's fp32 part first (so that zeroing it leaves the
/// flipped filter alone), the flipped filter from this byte on, 256-byte aligned for TMA.
pub(super) fn flipped_filter_start(p: &ConvProblem, split: Split) -> u64 {
    split.workspace_bytes(destination_elements(p)).next_multiple_of(256)
}
