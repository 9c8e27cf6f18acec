#!/usr/bin/env bash
# The ONNX backend node tests of the operators ipu-onnx imports (OPS in onnx-conformance-cases.py), run on the
# simulated device: every case is `ipu run MODEL --data DATASET --tiles 4`, which checks the
# outputs against the suite's expected outputs (and against the host reference).
#
#   bash scripts/onnx-conformance.sh [--subset] [--filter REGEX] [--jobs N] [--table FILE]
#
# Sets up target/onnx-venv with the pinned onnx and numpy (pip), writes the cases with
# scripts/onnx-conformance-cases.py into target/onnx-conformance/cases (regenerated when the
# onnx version or that script changes), builds the release `ipu` (or takes $IPU), and prints
# one line per case:
#
#   pass NAME
#   fail NAME: <the comparison with the largest error, or the error>
#   refused NAME: <the importer's or the planner's reason>
#
# then `N refused` and `N passed, N failed` (refusals are counted apart from the failures). A refusal is an error from import or planning
# (exit 2 with `importing ...` or `building ...`); a failed check (exit 1), a device fault, an
# internal compiler error, a data set the model disagrees with, a crash or a timeout is a
# failure. Exit status 0 unless a case fails. --subset runs the fixed list SUBSET below;
# --filter keeps the cases whose name matches the extended regular expression; --table FILE
# writes the per-operator table and the refusals grouped by reason (Markdown) for docs/onnx.md.
set -euo pipefail
cd "$(dirname "$0")/.."

ONNX_VERSION=1.23.2
NUMPY_SPEC='numpy<3'
VENV=target/onnx-venv
WORK=target/onnx-conformance
CASE_TIMEOUT=${CASE_TIMEOUT:-300}

# A representative fixed subset for CI: passes and refusals of every operator family.
SUBSET="
test_add
test_add_bcast
test_sub_bcast
test_mul_example
test_div_bcast
test_matmul_2d
test_matmul_4d
test_gemm_all_attributes
test_gemm_transposeA
test_gemm_default_scalar_bias
test_reciprocal
test_neg
test_exp
test_relu
test_leakyrelu_default
test_sigmoid
test_pow
test_sqrt
test_softmax_axis_0
test_softmax_default_axis
test_softmax_example_expanded
test_layer_normalization_2d_axis0
test_layer_normalization_2d_axis1
test_split_equal_parts_2d
test_reshape_reordered_all_dims
test_cast_FLOAT_to_FLOAT8E4M3FNUZ
test_cast_FLOAT8E5M2FNUZ_to_FLOAT16
test_attention_4d_fp16
test_reduce_mean_default_axes_keepdims_example
test_reduce_sum_keepdims_example
test_reduce_max_do_not_keepdims_example
test_transpose_all_permutations_3
test_reshape_negative_extended_dims
test_flatten_axis2
test_squeeze
test_unsqueeze_two_axes
test_concat_3d_axis_negative_2
test_slice_negative_axes
test_split_equal_parts_2d
test_gather_0
test_expand_dim_changed
test_cast_FLOAT_to_FLOAT16
test_constant
test_shape_start_1_end_negative_1
test_identity
test_dropout_default
test_attention_4d
test_attention_3d_gqa
"

subset=0
filter=
table=
jobs=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
    case "$1" in
        --subset) subset=1 ;;
        --filter) filter=${2:?--filter needs a regular expression}; shift ;;
        --jobs) jobs=${2:?--jobs needs a number}; shift ;;
        --table) table=${2:?--table needs a file}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "onnx-conformance: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

# --- Python with the pinned onnx ---------------------------------------------------------
have_onnx() {
    "$@" -c "import onnx, numpy, sys; sys.exit(onnx.__version__ != '$ONNX_VERSION')" 2>/dev/null
}
PY=()
if have_onnx "$VENV/bin/python"; then
    PY=("$VENV/bin/python")
elif [ -d "$VENV/lib-target" ] && have_onnx env PYTHONPATH="$VENV/lib-target" python3; then
    PY=(env PYTHONPATH="$VENV/lib-target" python3)
else
    echo "onnx-conformance: setting up $VENV (onnx==$ONNX_VERSION, numpy)" >&2
    rm -rf "$VENV"
    # ONNX_CONFORMANCE_NO_VENV=1 takes the fallback without a venv (to test it).
    if [ -n "${ONNX_CONFORMANCE_NO_VENV:-}" ] || ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        # Debian's python3 lacks ensurepip without python3-venv.
        rm -rf "$VENV"
        if [ -z "${ONNX_CONFORMANCE_NO_VENV:-}" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
            apt-get install -y -q python3-venv >/dev/null 2>&1 ||
                { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q python3-venv >/dev/null 2>&1; } || true
        fi
        [ -n "${ONNX_CONFORMANCE_NO_VENV:-}" ] || python3 -m venv "$VENV" >/dev/null 2>&1 || rm -rf "$VENV"
    fi
    if [ -x "$VENV/bin/python" ]; then
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "onnx==$ONNX_VERSION" "$NUMPY_SPEC" >&2
        PY=("$VENV/bin/python")
    else
        # No venv module at all: a plain target directory for pip.
        mkdir -p "$VENV"
        python3 -m pip install -q --disable-pip-version-check --target "$VENV/lib-target" \
            "onnx==$ONNX_VERSION" "$NUMPY_SPEC" >&2
        PY=(env PYTHONPATH="$VENV/lib-target" python3)
    fi
    have_onnx "${PY[@]}" || { echo "onnx-conformance: onnx $ONNX_VERSION did not install" >&2; exit 2; }
fi

# --- The cases -----------------------------------------------------------------------------
CASES=$WORK/cases
stamp="onnx $ONNX_VERSION $(cksum < scripts/onnx-conformance-cases.py)"
if [ "$(cat "$CASES/stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "onnx-conformance: writing the node test cases into $CASES" >&2
    "${PY[@]}" scripts/onnx-conformance-cases.py "$CASES"
    echo "$stamp" > "$CASES/stamp"
fi

# --- The ipu binary ------------------------------------------------------------------------
if [ -z "${IPU:-}" ]; then
    cargo build --release --quiet -p ipu-cli
    IPU=${CARGO_TARGET_DIR:-target}/release/ipu
fi
IPU=$(cd "$(dirname "$IPU")" && pwd)/$(basename "$IPU")
[ -x "$IPU" ] || { echo "onnx-conformance: no ipu binary at $IPU" >&2; exit 2; }

# --- Selection -----------------------------------------------------------------------------
list=$(mktemp)
RUN=$(mktemp -d "${TMPDIR:-/tmp}/onnx-conformance.XXXXXX")
trap 'rm -rf "$RUN" "$list"' EXIT
cp "$CASES/cases.tsv" "$list"
if [ "$subset" = 1 ]; then
    printf '%s\n' $SUBSET | awk -F'\t' 'NR == FNR { want[$1] = 1; next } $1 in want' - "$list" > "$list.s"
    missing=$(printf '%s\n' $SUBSET | awk -F'\t' 'NR == FNR { have[$1] = 1; next } !($1 in have)' "$list" -)
    [ -z "$missing" ] || { echo "onnx-conformance: subset cases not generated: $missing" >&2; exit 2; }
    mv "$list.s" "$list"
fi
if [ -n "$filter" ]; then
    awk -F'\t' -v re="$filter" '$1 ~ re' "$list" > "$list.f" && mv "$list.f" "$list"
fi

# --- One case ------------------------------------------------------------------------------
# run_case NAME: writes RUN/NAME.result: "pass|fail|refused<TAB>OP<TAB>LINE".
run_case() {
    local name=$1 dir=$CASES/$1 out=$RUN/$1
    local args=() d rc=0 msg verdict op dims
    IFS=$'\t' read -r _ op dims < <(awk -F'\t' -v n="$name" '$1 == n' "$CASES/cases.tsv")
    for d in $dims; do args+=(--dim "$d"); done
    IPU_LOG=error RUST_BACKTRACE=0 timeout "$CASE_TIMEOUT" "$IPU" run "$dir/model.onnx" --data "$dir/test_data_set_0" \
        --tiles 4 --artifacts "$out.artifacts" "${args[@]}" > "$out.stdout" 2> "$out.stderr" || rc=$?
    case $rc in
        0) verdict=pass msg= ;;
        1)
            verdict=fail
            msg=$(awk '/^output=.* result=FAIL$/ {
                    e = $0; sub(/.*max_abs_error=/, "", e); sub(/ .*/, "", e); e += 0
                    if (!seen || e > best) { best = e; line = $0; seen = 1 }
                } END { print line }' "$out.stdout")
            [ -n "$msg" ] || msg="exit 1 with no failed comparison"
            ;;
        2)
            msg=$(grep -m1 '^error: ' "$out.stderr" | sed 's/^error: //') || true
            [ -n "$msg" ] || msg="exit 2: $(tail -n1 "$out.stderr")"
            case $msg in
                *"internal compiler error"*) verdict=fail ;;
                "importing "* | "building "*) verdict=refused ;;
                *) verdict=fail ;;
            esac
            ;;
        124) verdict=fail msg="timed out after ${CASE_TIMEOUT}s" ;;
        101)
            # A panic: where, and the message on the next line.
            verdict=fail
            msg="panic: $(awk '/panicked at/ { sub(/.*panicked at /, ""); where = $0; getline; print where " " $0; exit }' "$out.stderr")"
            ;;
        *) verdict=fail msg="exit $rc: $(tail -n1 "$out.stderr")" ;;
    esac
    # Paths of this run say nothing about the case.
    msg=${msg//"$dir/"/}
    printf '%s\t%s\t%s\n' "$verdict" "$op" "$msg" > "$out.result"
    rm -rf "$out.artifacts"
}
export -f run_case
export IPU CASES RUN CASE_TIMEOUT

start=$(date +%s)
cut -f1 "$list" | xargs -P "$jobs" -I{} bash -c 'run_case "$1"' _ {}
elapsed=$(( $(date +%s) - start ))

# --- Report --------------------------------------------------------------------------------
passed=0 failed=0 refused=0
while IFS=$'\t' read -r name op dims; do
    IFS=$'\t' read -r verdict _ msg < "$RUN/$name.result"
    case $verdict in
        pass) passed=$((passed + 1)); echo "pass $name" ;;
        fail) failed=$((failed + 1)); echo "fail $name: $msg" ;;
        refused) refused=$((refused + 1)); echo "refused $name: $msg" ;;
    esac
done < "$list"
cases=$((passed + failed + refused))
echo "$cases cases in $elapsed s with $jobs jobs"
if [ -n "$table" ]; then
    # Per operator: cases, passed, failed, refused; then the refusals grouped by reason (node,
    # tensor and value names taken out), with the cases of each (Markdown tables).
    {
        echo "| op type | cases | passed | failed | refused |"
        echo "|---|---|---|---|---|"
        while IFS=$'\t' read -r name _ _; do
            IFS=$'\t' read -r verdict op _ < "$RUN/$name.result"
            echo "$op $verdict"
        done < "$list" | awk '{ n[$1]++; c[$1 " " $2]++; t[$2]++ }
            END {
                for (o in n) printf "| %s | %d | %d | %d | %d |\n", o, n[o], c[o " pass"], c[o " fail"], c[o " refused"] | "sort"
                close("sort")
                printf "| all | %d | %d | %d | %d |\n", NR, t["pass"], t["fail"], t["refused"]
            }'
        echo
        echo "| refusal | cases | which |"
        echo "|---|---|---|"
        while IFS=$'\t' read -r name _ _; do
            IFS=$'\t' read -r verdict _ msg < "$RUN/$name.result"
            [ "$verdict" = refused ] || continue
            reason=$(printf '%s\n' "$msg" | sed -E 's/^importing [^:]*: //; s/^building [^:]*: %[^:]*: //;
                s/node `[^`]*`:? ?//; s/(tensor|input|operand) `[^`]*`/\1/g; s/ %[A-Za-z0-9_.]+/ (value)/g')
            printf '%s\t%s\n' "$reason" "$name"
        done < "$list" | sort | awk -F'\t' '
            $1 != r { if (n) printf "| %s | %d | %s |\n", r, n, w; r = $1; n = 0; w = "" }
            { n++; w = w (w == "" ? "" : ", ") "`" $2 "`" }
            END { if (n) printf "| %s | %d | %s |\n", r, n, w }' | sort -t'|' -k3,3nr
    } > "$table"
fi
echo "$refused refused"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
