# Sourced by r4.sh and r7.sh on the H200: join the bundle parts copied to /tmp/x (MLX CUDA and
# Python wheels, the default model as smol/, the stripped binary), check them, install the wheels
# into /tmp/site and the binary as $B.
X=/tmp/x
cat $X/bundle.part.* > $X/bundle.tar
echo "$(cat $X/bundle.sha256)  $X/bundle.tar" | sha256sum -c || exit 3
tar -xf $X/bundle.tar -C $X
python3 -m pip install -q --no-index --no-deps --target /tmp/site $X/mlx_cuda_13-*.whl $X/mlx-0.32.2-*.whl $X/mlx_lm-*.whl 2>&1 | tail -2
cp $X/cohort $B && chmod +x $B
