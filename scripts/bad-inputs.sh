#!/usr/bin/env bash
# Tries the bad inputs of docs/robustness.md on `ipu` and prints the Markdown table of what
# each gets: the input, the exit status and the first error line (paths shortened).
#
#   IPU=target/release/ipu bash scripts/bad-inputs.sh > table.md
set -uo pipefail
cd "$(dirname "$0")/.."
IPU=${IPU:-target/release/ipu}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
export IPU_LOG=warn

py() { python3 -c "$1"; }
row() { # description, then the command
  local what=$1; shift
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  err=$(printf '%s\n' "$err" | grep -m1 -E '^(error|finding)' | sed "s#$D/##g" | cut -c1-230)
  printf '| %s | %s | `%s` |\n' "$what" "$rc" "${err//|/\\|}"
}

"$IPU" build matmul --tiles 4 -o "$D/mm.ipuexe" >/dev/null
graph() { printf 'graph t {\n%s\n}\n' "$1" > "$D/$2"; echo "$D/$2"; }
edit() { # a package with its manifest edited by a Python expression on `m`, checksums redone
  python3 - "$D/mm.ipuexe" "$D/$2" "$1" <<'PY'
import json, struct, sys, zlib
src, dst, code = sys.argv[1:]
b = open(src, 'rb').read()
n = struct.unpack_from('<I', b, 12)[0]
secs = []
for i in range(n):
    e = 32 + 32 * i
    kind, enc = struct.unpack_from('<II', b, e)
    off, ln = struct.unpack_from('<QQ', b, e + 8)
    # Deflated sections (format 3) are decoded; all are written back stored.
    p = zlib.decompress(b[off:off + ln], -15) if enc == 1 else b[off:off + ln]
    secs.append([kind, p])
m = json.loads(secs[0][1]); exec(code); secs[0][1] = json.dumps(m).encode()
out = bytearray(32 + 32 * n); out[:8] = b[:8]; out[8:16] = b[8:16]
for i, (kind, p) in enumerate(secs):
    out += b'\0' * (-len(out) % 8); e = 32 + 32 * i
    struct.pack_into('<IIQQII', out, e, kind, 0, len(out), len(p), zlib.crc32(p), 0); out += p
out[16:20] = b'\0' * 4; struct.pack_into('<I', out, 16, zlib.crc32(bytes(out[:32 + 32 * n])))
open(dst, 'wb').write(out)
PY
  echo "$D/$2"
}

echo "| bad input | exit | message |"
echo "|---|---|---|"
py "open('$D/paren.s','w').write('.word '+'('*3000+'1'+')'*3000+'\n')"
row "assembly: 3,000 nested parentheses" "$IPU" asm "$D/paren.s" -o "$D/x.bin"
py "open('$D/neg.s','w').write('.word '+'-'*50000+'1\n')"
row "assembly: 50,000 unary minus signs" "$IPU" sim "$D/neg.s"
py "open('$D/sum.s','w').write('.word '+'+'.join(['1']*1000)+'\n')"
row "assembly: a flat sum of 1,000 terms" "$IPU" asm "$D/sum.s" -o "$D/x.bin"
printf 'nop\n  \xff\xfe\n' > "$D/bad.s"
row "assembly that is not UTF-8" "$IPU" asm "$D/bad.s"
row "graph: a rank-100,000 type" "$IPU" graph check "$(graph "  input %x: f32[$(py "print(', '.join(['1']*100000))")]
  output %x" rank.ipug)"
row "graph: a rank-17 type" "$IPU" graph check "$(graph "  input %x: f32[$(py "print(', '.join(['1']*17))")]
  output %x" rank17.ipug)"
row "graph: an integer too large for its field" "$IPU" graph check "$(graph '  input %x: f32[4, 8]
  %y = softmax(%x) {axis = 99999999999999999999}: f32[4, 8]
  output %y' big.ipug)"
row "graph: an unknown operation" "$IPU" graph check "$(graph '  input %x: f32[4]
  %y = frob(%x): f32[4]
  output %y' op.ipug)"
row "attention: q f16 with k f32" "$IPU" build "$(graph '  input %q: f16[1, 32, 16]
  input %k: f32[1, 32, 16]
  input %v: f16[1, 32, 16]
  %o = attention(%q, %k, %v) {scale = 0.25, causal = false, partials = f32}: f32[1, 32, 16]
  output %o' att.ipug)" -o "$D/x.ipuexe"
row "flash_attention: q f16 with k f143" "$IPU" build "$(graph '  input %q: f16[1, 32, 16]
  input %k: f143@0[1, 32, 16]
  input %v: f143@0[1, 32, 16]
  %o = flash_attention(%q, %k, %v) {scale = 0.25, causal = false, block_q = 128, block_k = 128, partials = f32}: f32[1, 32, 16]
  output %o' flash.ipug)" -o "$D/x.ipuexe"
row "package: an input of shape [2^40, 2^40]" "$IPU" exec "$(edit 'm["tensors"][0]["shape"] = [1 << 40, 1 << 40]' absurd.ipuexe)"
row "package: a tensor offset moved by 4 bytes" "$IPU" exec "$(edit 'm["tensors"][1]["offset"] += 4' unaligned.ipuexe)"
row "package: an empty tensor list" "$IPU" exec "$(edit 'm["tensors"] = []' empty.ipuexe)"
row "package: the last tensor deleted" "$IPU" exec "$(edit 'm["tensors"].pop()' deleted.ipuexe)"
row "package: a tensor duplicated" "$IPU" exec "$(edit 'm["tensors"].insert(0, m["tensors"][0])' dup.ipuexe)"
row "package: roles swapped" "$IPU" exec "$(edit 'exec("for t in m[\"tensors\"]: t[\"role\"] = {\"input\": \"output\", \"output\": \"input\"}[t[\"role\"]]")' roles.ipuexe)"
row "package: a program of 0 phases" "$IPU" exec "$(edit 'm["programs"][1]["phases"] = 0' phases0.ipuexe)"
row "package: a program of 950,272 phases" "$IPU" exec "$(edit 'm["programs"][1]["phases"] = 950272' phasesbig.ipuexe)"
cp "$D/mm.ipuexe" "$D/trailing.ipuexe"; printf 'trailing' >> "$D/trailing.ipuexe"
row "package: 8 bytes appended" "$IPU" exec "$D/trailing.ipuexe"
py "b=bytearray(open('$D/mm.ipuexe','rb').read()); b[24]=1; open('$D/reserved.ipuexe','wb').write(b)"
row "package: a reserved header byte set (header CRC stale)" "$IPU" exec "$D/reserved.ipuexe"
py "
import struct, zlib
b = bytearray(open('$D/mm.ipuexe', 'rb').read())
off, ln = struct.unpack_from('<QQ', b, 32 + 8)
b[off] |= 6  # the manifest's deflate stream: a reserved block type
struct.pack_into('<I', b, 32 + 24, zlib.crc32(bytes(b[off:off + ln])))
n = struct.unpack_from('<I', b, 12)[0]; b[16:20] = bytes(4)
struct.pack_into('<I', b, 16, zlib.crc32(bytes(b[:32 + 32 * n])))
open('$D/inflate.ipuexe', 'wb').write(b)"
row "package: the manifest's deflate stream corrupt (checksums redone)" "$IPU" exec "$D/inflate.ipuexe"
row "run past its cycle budget" "$IPU" exec "$D/mm.ipuexe" --max-cycles 1000
row "--min-cosine 2" "$IPU" run matmul --min-cosine 2
row "--rtol nan" "$IPU" run matmul --rtol nan
row "--atol=-1" "$IPU" run matmul --atol=-1
row "--set m=4 --set m=8" "$IPU" run matmul --set m=4 --set m=8
row "--tiles -1" "$IPU" run matmul --tiles -1
