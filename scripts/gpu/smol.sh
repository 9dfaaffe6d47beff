# Sourced on the GPU machine by the recipes that run the default model (lane.sh, exact.sh): the
# MLX CUDA wheel and the binary (wheel.sh), then the imported default model in /tmp/smol from its
# two parts, with its trained MTP head when this call carries it (.gpu/bin/mtp.safetensors).
# Parts come in /tmp/x from the calls before (wheel.a; smol.a; wheel.b + wheel.sha256) or with
# this call (.gpu/w2, .gpu/m2, .gpu/bin).
mkdir -p /tmp/x
for d in .gpu/w2 .gpu/m2 .gpu/bin; do [ -d $d ] && cp -n $d/* /tmp/x/ 2>/dev/null; done
mkdir -p .gpu/w2 && cp -n /tmp/x/wheel.b /tmp/x/wheel.sha256 .gpu/w2/ 2>/dev/null
mkdir -p .gpu/bin && cp -n /tmp/x/cohort.xz .gpu/bin/ 2>/dev/null
. scripts/gpu/wheel.sh
# Steps on random weights (exact.sh synth) need no model: without its parts, none is unpacked.
if [ -f /tmp/x/smol.a ]; then
  cat /tmp/x/smol.a /tmp/x/smol.b > /tmp/smol.tar
  echo "$(cat /tmp/x/smol.sha256)  /tmp/smol.tar" | sha256sum -c --quiet || exit 3
  tar -xf /tmp/smol.tar -C /tmp
  [ -f /tmp/x/mtp.safetensors ] && cp /tmp/x/mtp.safetensors /tmp/smol/
else
  echo "no model parts in /tmp/x: the default model is not unpacked"
fi
