# The folders of src/ form a layered order (scripts/check_layers.py): no two include each
# other, directly or through others. The check itself fails on a cycle, naming the include.
source "$(dirname "$0")/lib.sh"
check=$ROPELAB_SRC/scripts/check_layers.py
expect_exit 0 python3 "$check" "$ROPELAB_SRC/src"
expect_in "the folders are layered: "
expect_in "weights < "

mkdir -p "$WORK/src/low" "$WORK/src/mid" "$WORK/src/high"
printf '#include "low/a.h"\n' >"$WORK/src/mid/b.h"
printf '#include "mid/b.h"\n' >"$WORK/src/high/c.cpp"
expect_exit 0 python3 "$check" "$WORK/src"
expect_in "layered: low < mid < high"
printf '#include <vector>\n#include "high/c.h"\n' >"$WORK/src/low/a.cpp"  # low -> high -> mid -> low
expect_exit 1 python3 "$check" "$WORK/src"
expect_in "low/a.cpp: #include \"high/...\" while high/ includes low/"
echo "layering: ok"
