# Every relative link and anchor in README.md, BENCHMARKS.md and docs/ resolves
# (scripts/check_links.py); and the check itself fails on a missing page, a missing heading
# and a wrong folder, naming the file and line.
source "$(dirname "$0")/lib.sh"
check=$ROPELAB_SRC/scripts/check_links.py
expect_exit 0 python3 "$check"
expect_in "every relative link and anchor resolves"

mkdir -p "$WORK/docs/sub"
cat >"$WORK/docs/page.md" <<'MD'
# A page

## Two `words` here

[ok](#two-words-here) [ok](sub/other.md#the-other) [ok](sub/) `[not a link](nowhere.md)`

```
[in code](nowhere.md)
```

[missing page](nowhere.md)
[missing heading](sub/other.md#no-such-heading)
[missing here](#nothing)
MD
printf '# The other\n' >"$WORK/docs/sub/other.md"
expect_exit 1 python3 "$check" "$WORK/docs/page.md"
expect_in "page.md:11: nowhere.md: no such file"
expect_in "page.md:12: sub/other.md#no-such-heading: no heading #no-such-heading"
expect_in "page.md:13: #nothing: no heading #nothing"
expect_in "3 broken link(s)"
echo "doc_links: ok"
