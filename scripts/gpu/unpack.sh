# Sourced by the rN.sh scripts (now in archive/) on the H200: join the bundle parts copied to /tmp/x, check them,
# unpack (the MLX CUDA wheel and any Python wheels, the default model as smol/, the stripped
# binary as cohort or cohort.xz, optionally data.tar.xz), install the wheels into /tmp/site and the
# binary as $B.
X=/tmp/x
cat $X/bundle.part.* > $X/bundle.tar
echo "$(cat $X/bundle.sha256)  $X/bundle.tar" | sha256sum -c || exit 3
tar -xf $X/bundle.tar -C $X
python3 -m pip install -q --no-index --no-deps --target /tmp/site $X/*.whl 2>&1 | tail -2
if [ -f $X/cohort.xz ]; then xz -dc $X/cohort.xz > $B; else cp $X/cohort $B; fi
chmod +x $B
if [ -f $X/data.tar.xz ]; then mkdir -p /tmp/d && tar -xJf $X/data.tar.xz -C /tmp/d; fi
