//! The invokers: the products of a layer on the caller's tensors, their launches, splits and
//! reductions.

use super::geometry::*;
use super::packing::*;
use super::space::*;
use super::tile::*;
use super::*;

impl IgemmWgmma {
    /// The products of `p` (a layer as it runs, not packed), on `user`'s tensors: `p`'s own,
    /// or where `p` is the blocked twin of `user`, its filter read from w as blocks
    /// (forward and backward-data) or its gradient's diagonal blocks stored into w
    /// (backward-weight).
    pub(super) fn products(
        &self,
        p: &ConvProblem,
        config: &Config,
        user: &ConvProblem,
    ) -> Result<Box<dyn Invoker<Cuda>>> {
        let config = WgmmaConfig::from_config(p, config)?;
        let (WgmmaConfig { tile, split }, source) = (config, config.source(p, user));
        let shared = tile.shared_bytes(p.dtype);
        let block_dim = (128 * (tile.wg + 1), 1, 1);
        let sms = self.device.sm_count;
        if p.direction == Direction::BackwardWeight {
            let function = self.device.function(&source, "igemm_wgmma_weight")?;
            launch::allow_shared(&function, shared, self.id())?;
            let geo = Geometry::new(p);
            let (_, units) = config.work(p);
            let stream_k = (split.reduction == Reduction::StreamK).then(|| config.stream_k(p, sms));
            let ctas = stream_k.map_or_else(|| tile.grid(units, sms), |stream_k| stream_k.ctas as u32);
            let launch = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim, shared_mem_bytes: shared };
            let reduce = split.reduce(destination_elements(user), &self.device, &source)?;
            let product = Product::all(p).swap_remove(0);
            // The filter stored into is the user's: its strides, and its groups' channels.
            let params = ConvParams { ws: ConvParams::new(user).ws, ..product.params };
            let invoker = WeightInvoker {
                function,
                launch,
                dy: ((geo.n * geo.output_volume()) as u64, u64::from(p.k)),
                // Each CTA of a cluster loads its share of x's pixels.
                x: product.source_map(p, row_elements(p.dtype), row_elements(p.dtype) / tile.cl),
                params,
                groups: ((user.k / user.g) as i32, user.c_per_group() as i32),
                dtype: p.dtype,
                splits: split.slices as i32,
                reduce,
                stream_flag_bytes: stream_k.map_or(0, |stream_k| stream_k.flag_bytes(tile)),
            };
            return Ok(Box::new(invoker));
        }
        let all = Product::all(p);
        let halo = all.first().and_then(|product| HaloTile::of(&product.params, tile)).filter(|_| tile.halo);
        let shared = shared + halo.map_or(0, |halo| 2 * halo.buffer_bytes(&all[0].params, tile));
        let function = self.device.function(&source, "igemm_wgmma")?;
        launch::allow_shared(&function, shared, self.id())?;
        let geo = Geometry::new(p);
        let direct = reads_filter_directly(p);
        // w itself in boxes of 64 channels c x the cluster's share of 64 output channels k; or
        // the filter matrix (w, or its flipped copy) in boxes of the cluster's share of the
        // column tile's rows x a 128-byte row of the reduction; a blocked layer (`user` its
        // grouped self) in boxes of a group's rows of w.
        let share = if direct { 64 / tile.cl } else { tile.bn / tile.cl };
        let blocked = (user.g != p.g).then(|| (user.k / user.g, user.c_per_group()));
        let filled = filled_filter(user, tile);
        let blocks = match blocked {
            Some((kg, cg)) => FilterBlocks {
                rows: gcd(i64::from(share), i64::from(kg)) as u32,
                group_rows: kg as i32,
                channels: cg as i32,
                w: 0,
            },
            None => FilterBlocks { rows: share, group_rows: 1, channels: 0, w: 0 },
        };
        let filter_box = [if direct { 64 } else { row_elements(p.dtype) }, 1, blocks.rows];
        let one_product = all.len() == 1;
        let destination = stores_tiles(p, config, &all[0], one_product).then(|| {
            let (_, columns) = all[0].channels();
            // A warp stores its 16 rows of each 64-row slice, a 128-byte row of columns at a time.
            ([u64::from(p.g * columns), all[0].rows, 1], [row_elements(p.dtype), 16, 1])
        });
        let launches = all
            .chunks(MAX_PRODUCTS)
            .map(|products| {
                let units = products.iter().map(|product| product.units(tile, p.g, split.slices)).sum();
                let launch =
                    LaunchConfig { grid_dim: (tile.grid(units, sms), 1, 1), block_dim, shared_mem_bytes: shared };
                let products = products
                    .iter()
                    .map(|product| {
                        let source = product.has_taps().then(|| match halo {
                            // A 2D source's channels, columns, rows and images.
                            Some(halo) => SourceMap::Halo(
                                std::array::from_fn(|i| product.src[i]),
                                [row_elements(p.dtype), halo.pitch, halo.loaded, 1],
                            ),
                            None => product.source_map(p, row_elements(p.dtype), tile.rows()),
                        });
                        let (offset, mut extents) = if direct {
                            (0, [geo.cg as u64, geo.filter_volume() as u64, u64::from(p.k)])
                        } else {
                            (product.filter_offset, product.filter_extents())
                        };
                        if let Some((_, cg)) = blocked {
                            extents[0] = u64::from(cg);
                        }
                        let filter = filled.is_none().then_some((offset, extents));
                        ProductLaunch {
                            params: product.params,
                            tap_map: product.tap_map,
                            source,
                            filter,
                            dst_offset: product.dst_offset,
                        }
                    })
                    .collect();
                ProductsLaunch { launch, products }
            })
            .collect();
        let flip = match p.direction {
            Direction::BackwardData if !direct => {
                let launch = LaunchConfig {
                    grid_dim: (
                        (geo.cg as u32).div_ceil(FLIP_TILE),
                        (geo.kg as u32).div_ceil(FLIP_TILE),
                        p.g * geo.filter_volume() as u32,
                    ),
                    block_dim: (FLIP_TILE, FLIP_ROWS, 1),
                    shared_mem_bytes: 0,
                };
                Some(Flip {
                    function: self.device.function(&source, "flip_filter")?,
                    launch,
                    params: ConvParams::new(p),
                })
            }
            _ => None,
        };
        let split = SplitLaunch {
            slices: split.slices as i32,
            mode: split.mode(),
            elements: destination_elements(p) as i32,
            reduce: split.reduce(destination_elements(p), &self.device, &source)?,
            filter_start: flipped_filter_start(p, split),
        };
        Ok(Box::new(WgmmaInvoker {
            function,
            launches,
            one_product,
            destination,
            direction: p.direction,
            dtype: p.dtype,
            filter_box,
            blocks,
            flip,
            split,
        }))
    }
}

/// Backward-data's filter transpose into the workspace, one phase after another.
pub(super) struct Flip {
    pub(super) function: CudaFunction,
    pub(super) launch: LaunchConfig,
    /// The convolution's own parameters.
    pub(super) params: ConvParams,
}

/// Up to MAX_PRODUCTS products in one grid.
pub(super) struct ProductsLaunch {
    pub(super) launch: LaunchConfig,
    pub(super) products: Vec<ProductLaunch>,
}

/// How the kernels read the source: by im2col at each tap's offsets, or as a matrix (its
/// extents and box, see reads_source_tiled).
pub(super) enum SourceMap {
    Im2col(Im2col),
    Tiled([u64; 3], [u32; 3]),
    /// HALO's rectangles: channels, columns, rows and images, and the box of one.
    Halo([u64; 4], [u32; 4]),
}

impl SourceMap {
    pub(super) fn map(&self, src: Buffer, dtype: DataType) -> Result<TensorMap> {
        match self {
            SourceMap::Im2col(im2col) => TensorMap::im2col(src, dtype, im2col),
            SourceMap::Tiled(extents, boxes) => TensorMap::tiled(src, dtype, *extents, *boxes),
            SourceMap::Halo(extents, boxes) => TensorMap::tiled(src, dtype, *extents, *boxes),
        }
    }
}

/// One product's part of a launch.
pub(super) struct ProductLaunch {
    pub(super) params: ConvParams,
    pub(super) tap_map: TapMap,
    /// The source's map; none where no tap reaches (the kernel reads nothing and stores
    /// zeros, handed the first product's maps).
    pub(super) source: Option<SourceMap>,
    /// The filter: its offset in elements, and extents; none where the kernel's helper warps
    /// write it from w (FILL_FILTER: a group's channels may be too few for a map's rows).
    pub(super) filter: Option<(u64, [u64; 3])>,
    pub(super) dst_offset: u64,
}

/// Forward and backward-data.
pub(super) struct WgmmaInvoker {
    pub(super) function: CudaFunction,
    /// The products, the longest reductions first.
    pub(super) launches: Vec<ProductsLaunch>,
    /// Whether the problem has one product (the kernel's PRODUCTS 1).
    pub(super) one_product: bool,
    /// The destination as a matrix of pixels x channels that the kernel stores whole tiles
    /// into by TMA (its dst_tiled; see stores_tiles): extents and box.
    pub(super) destination: Option<([u64; 3], [u32; 3])>,
    pub(super) direction: Direction,
    pub(super) dtype: DataType,
    /// The filter box a CTA loads, `blocks.rows` rows of it at a time (see `products`); w's
    /// address is the run's.
    pub(super) filter_box: [u32; 3],
    pub(super) blocks: FilterBlocks,
    pub(super) flip: Option<Flip>,
    pub(super) split: SplitLaunch,
}

/// How a forward or backward-data invoker splits its reductions.
pub(super) struct SplitLaunch {
    pub(super) slices: i32,
    /// The kernel's output mode (see Split::mode).
    pub(super) mode: i32,
    /// The destination's elements: a slice's fp32 copy in the workspace.
    pub(super) elements: i32,
    pub(super) reduce: Option<Reduce>,
    /// Where backward-data's flipped filter starts in the workspace, in bytes.
    pub(super) filter_start: u64,
}

impl Invoker<Cuda> for WgmmaInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let split = &self.split;
        if let Some(reduce) = &split.reduce {
            reduce.zero(b)?;
        }
        let src = if self.direction == Direction::BackwardData { b.y } else { b.x };
        let filter = match &self.flip {
            Some(flip) => {
                let flipped = b.workspace.from_byte(split.filter_start);
                let args = [Arg::Buffer(b.w), Arg::Buffer(flipped), Arg::Params(&flip.params)];
                launch::kernel(b, &flip.function, flip.launch, &args, "launch cuda.igemm_wgmma's filter transpose")?;
                flipped
            }
            None => b.w,
        };
        let elem = self.dtype.size_bytes() as u64;
        let blocks = FilterBlocks { w: filter.ptr, ..self.blocks };
        let dst = b.output(self.direction);
        // Tensor maps hold the buffers' addresses, so they are made per run (a few microseconds
        // of host time; a captured graph keeps the ones it was captured with).
        let maps = |product: &ProductLaunch| -> Result<Option<(TensorMap, TensorMap)>> {
            let Some(source) = &product.source else { return Ok(None) };
            let source = source.map(src, self.dtype)?;
            let filter = match product.filter {
                Some((offset, extents)) => {
                    TensorMap::tiled(filter.from_byte(offset * elem), self.dtype, extents, self.filter_box)?
                }
                // A map the kernel does not read.
                None => source,
            };
            Ok(Some((source, filter)))
        };
        // Products without taps come after those with them: they take the first one's maps.
        let mut first = None;
        for launch in &self.launches {
            let products = launch
                .products
                .iter()
                .map(|product| {
                    let (src, filter) = match (maps(product)?, first) {
                        (Some(own), _) => {
                            first.get_or_insert(own);
                            own
                        }
                        (None, Some(first)) => first,
                        (None, None) => {
                            return Err(GconvError::Backend(
                                "cuda.igemm_wgmma: a product without taps came before any with them".into(),
                            ))
                        }
                    };
                    Ok(ProductArgs {
                        src,
                        filter,
                        params: product.params,
                        taps: product.tap_map,
                        dst_offset: product.dst_offset as i64,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let Some(products) = Products::new(&products) else {
                return Err(GconvError::Backend(format!(
                    "cuda.igemm_wgmma: {} products for one launch",
                    products.len()
                )));
            };
            // A kernel built for one product takes it in parameters of their own (see the kernel),
            // and the destination's map where it stores tiles (else a map it does not read).
            let dst_map;
            let mut args = if self.one_product {
                dst_map = match self.destination {
                    Some((extents, boxes)) => TensorMap::tiled(dst, self.dtype, extents, boxes)?,
                    None => products.src[0],
                };
                let [src, filter] = [&products.src[0], &products.filter[0]].map(|map| Arg::Struct(map));
                vec![
                    src,
                    filter,
                    Arg::Struct(&dst_map),
                    Arg::Params(&products.params[0]),
                    Arg::Struct(&products.taps[0]),
                ]
            } else {
                vec![Arg::Struct(&products)]
            };
            let dst_tiled = i32::from(self.destination.is_some());
            args.extend([
                Arg::Buffer(dst),
                Arg::Buffer(b.workspace),
                Arg::Int(split.slices),
                Arg::Int(split.mode),
                Arg::Int(split.elements),
                Arg::Int(dst_tiled),
                Arg::Struct(&blocks),
            ]);
            launch::kernel(b, &self.function, launch.launch, &args, "launch cuda.igemm_wgmma")?;
        }
        match &split.reduce {
            Some(reduce) => reduce.run(b, dst),
            None => Ok(()),
        }
    }
}

/// Split backward-weight's workspace: zeroed before atomics add into it, summed into dw after.
pub(super) struct Reduce {
    pub(super) function: CudaFunction,
    pub(super) zero_bytes: u64,
    pub(super) slices: i32,
    pub(super) count: i32,
    pub(super) blocks: u32,
}

impl Reduce {
    /// Zeroes what the atomics add into, if they do.
    pub(super) fn zero(&self, b: &CudaBuffers<'_>) -> Result<()> {
        if self.zero_bytes > 0 {
            b.zero_workspace(self.zero_bytes)?;
        }
        Ok(())
    }

    /// Sums the workspace's slices into `dst`.
    pub(super) fn run(&self, b: &CudaBuffers<'_>, dst: Buffer) -> Result<()> {
        let args = [Arg::Buffer(b.workspace), Arg::Int(self.slices), Arg::Int(self.count), Arg::Buffer(dst)];
        launch::kernel(
            b,
            &self.function,
            launch::flat(self.blocks, REDUCE_THREADS),
            &args,
            "launch cuda.igemm_wgmma's split reduction",
        )
    }
}

pub(super) struct WeightInvoker {
    pub(super) function: CudaFunction,
    pub(super) launch: LaunchConfig,
    /// dy as a matrix: a row per pixel, a column per output channel.
    pub(super) dy: (u64, u64),
    /// x, a block of pixels per load.
    pub(super) x: SourceMap,
    /// The forward convolution's, the filter's strides the user's.
    pub(super) params: ConvParams,
    /// The user's groups' output and input channels (the kernel's group_kg and group_cg).
    pub(super) groups: (i32, i32),
    pub(super) dtype: DataType,
    pub(super) splits: i32,
    pub(super) reduce: Option<Reduce>,
    /// Stream-K's flags, zeroed before the launch (0: not stream-K).
    pub(super) stream_flag_bytes: u64,
}

impl Invoker<Cuda> for WeightInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        if let Some(reduce) = &self.reduce {
            reduce.zero(b)?;
        }
        if self.stream_flag_bytes > 0 {
            b.zero_workspace(self.stream_flag_bytes)?;
        }
        let block = row_elements(self.dtype);
        let dy = TensorMap::tiled(b.y, self.dtype, [self.dy.1, self.dy.0, 1], [block, block, 1])?;
        let x = self.x.map(b.x, self.dtype)?;
        let args = [
            Arg::Struct(&dy),
            Arg::Struct(&x),
            Arg::Params(&self.params),
            Arg::Buffer(b.w),
            Arg::Buffer(b.workspace),
            Arg::Int(self.splits),
            Arg::Int(self.groups.0),
            Arg::Int(self.groups.1),
        ];
        // Stream-K's CTAs wait on later ones' partial sums: all must be resident at once.
        let residency = if self.stream_flag_bytes > 0 { Residency::AllAtOnce } else { Residency::Any };
        launch::kernel_with(b, &self.function, self.launch, residency, &args, "launch cuda.igemm_wgmma")?;
        match &self.reduce {
            Some(reduce) => reduce.run(b, b.w),
            None => Ok(()),
        }
    }
}
