# Source this on the GPU machine (it has no cargo and no internet): installs the gconv wheel
# built here (`maturin build --release -m crates/gconv-py/Cargo.toml -o .device/wheels`) and,
# where the machine lacks pytest, the wheels of `pip download pytest -d .device/pydeps`, into
# /tmp/gconv-site, and puts that first on PYTHONPATH.
#
# Each call gets a fresh machine, so gconv's user database starts empty and `gconv.tune` runs
# every find again (about 100 s a network). A database an earlier call brought back
# (`keep_gconv_db` below, into $OUT) and copied here as .device/gconv-user.db is put in place
# first: its finds are read, not run, where the device key is the same.
site=/tmp/gconv-site
rm -rf "$site"
pip install --quiet --no-deps --no-index --target "$site" .device/wheels/*.whl
python3 -c "import pytest" 2>/dev/null || pip install --quiet --no-deps --no-index --target "$site" .device/pydeps/*.whl
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
# gconv's default user database (the cache folder gconv-tune's `default_cache_dir` names).
gconv_db=${XDG_CACHE_HOME:-$HOME/.cache}/gconv/user.db
if [ -f .device/gconv-user.db ]; then
  mkdir -p "$(dirname "$gconv_db")"
  rm -f "$gconv_db" "$gconv_db-wal" "$gconv_db-shm"
  cp .device/gconv-user.db "$gconv_db"
fi
# Copies gconv's user database (with what this call found) to $OUT/gconv-user.db.
keep_gconv_db() { [ -f "$gconv_db" ] && python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" "$gconv_db" "$OUT/gconv-user.db"; }
