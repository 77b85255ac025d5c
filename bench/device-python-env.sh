# Source this on the GPU machine (it has no cargo and no internet): installs the gconv wheel
# built here (`maturin build --release -m crates/gconv-py/Cargo.toml -o .device/wheels`) and,
# where the machine lacks pytest, the wheels of `pip download pytest -d .device/pydeps`, into
# /tmp/gconv-site, and puts that first on PYTHONPATH.
site=/tmp/gconv-site
rm -rf "$site"
pip install --quiet --no-deps --no-index --target "$site" .device/wheels/*.whl
python3 -c "import pytest" 2>/dev/null || pip install --quiet --no-deps --no-index --target "$site" .device/pydeps/*.whl
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
