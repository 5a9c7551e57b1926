package heuristics

import "testing"

// Issue 22 item 8: every known-safe tool against its manual. unsafe forms
// write a file or run a program and must not be known-safe; safe forms
// must stay known-safe.
func TestKnownSafeToolOptions(t *testing.T) {
	for _, c := range []struct {
		tool         string
		unsafe, safe [][]string
	}{
		{"sed", [][]string{
			a("sed", "-n", "1p", "--expression=1e id > M"), a("sed", "-n", "1p", "-e", "1e id"), a("sed", "-n", "1p", "--e=1e id"),
			a("sed", "-n", "1p", "-f", "script.sed"), a("sed", "-n", "1p", "--file=/dev/stdin"), a("sed", "-n", "1p", "-fscript"),
			a("sed", "-n", "1p", "-i"), a("sed", "-n", "1p", "--in-place=.bak", "f"), a("sed", "-n", "1p", "-s", "f"),
			a("sed", "-n", "1p", "f", "-i"), a("sed", "-n", "1p", "--", "-i"), a("sed", "-n", "1p", "--posix", "f"),
			a("sed", "-n", "1e id", "f"), a("sed", "-n", "1w out", "f"), a("sed", "-n", "1W out", "f"), a("sed", "-n", "1r /etc/shadow", "f"),
			a("sed", "-n", "1R f2", "f"), a("sed", "-n", "1p;e id", "f"), a("sed", "-n", "1p\ne id", "f"), a("sed", "-n", "/x/e id", "f"),
			a("sed", "-n", "/x/w out", "f"), a("sed", "-n", `/a\/b/p`, "f"), a("sed", "-n", "s/x/y/e", "f"), a("sed", "-n", "1pw", "f"),
			a("sed", "1p", "f"), a("sed", "-i", "1p", "f"), a("sed", "--quiet", "-n", "1p"), a("sed", "-n"), a("sed", "-ne", "1p"),
			a("bash", "-lc", "sed -n 1p '--expression=1e id > M'"),
		}, [][]string{
			a("sed", "-n", "1p"), a("sed", "-n", "1p", "f"), a("sed", "-n", "1,5p", "f", "g"), a("sed", "-n", "$p", "f"),
			a("sed", "-n", "10,$p", "f"), a("sed", "-n", "/TODO/p", "f"), a("sed", "-n", "1p", "-"), a("sed", "-n", "1p", "1p"),
		}},
		{"rg", [][]string{
			a("rg", "--pre", "x", "p"), a("rg", "--pre=x", "p"), a("rg", "--pr=x", "p"), a("rg", "--hostname-bin=x", "p"),
			a("rg", "--hostname=x", "p"), a("rg", "--search-zip", "p"), a("rg", "--search=1", "p"), a("rg", "-z", "p"), a("rg", "-iz", "p"),
		}, [][]string{
			a("rg", "-n", "p"), a("rg", "--no-search-zip", "p"), a("rg", "--no-pre", "p"), a("rg", "-e", "--pre", "x"), a("rg", "--", "--pre"),
			a("rg", "--pre-glob", "*.gz", "p"),
		}},
		{"find", [][]string{
			a("find", ".", "-fprint", "f"), a("find", ".", "-fprint0", "f"), a("find", ".", "-fprintf", "f", "%p"), a("find", ".", "-fls", "f"),
			a("find", ".", "-delete"), a("find", ".", "-exec", "id", ";"), a("find", ".", "-execdir", "id", "+"), a("find", ".", "-ok", "id", ";"),
			a("find", ".", "-okdir", "id", ";"),
		}, [][]string{
			a("find", ".", "-name", "*.go"), a("find", ".", "-type", "f", "-print0"), a("find", ".", "-printf", "%p\n"), a("find", ".", "-ls"),
		}},
		{"git", [][]string{
			a("git", "-c", "core.pager=id", "log"), a("git", "-ccore.pager=id", "log"), a("git", "--exec-path=.", "log"), a("git", "--exec-path", ".", "log"),
			a("git", "--config-env=core.pager=X", "log"), a("git", "-C", "x", "log"), a("git", "--git-dir=x", "log"), a("git", "-p", "log"),
			a("git", "log", "--output=f"), a("git", "log", "--outp=f"), a("git", "diff", "--output", "f"), a("git", "show", "--out=f"),
			a("git", "diff", "--ext-diff"), a("git", "diff", "--ext"), a("git", "log", "--textconv"), a("git", "log", "--textc"),
			a("git", "show", "--ext-diff", "HEAD"), a("git", "log", "--exec=x"), a("git", "fetch", "--upload-pack=x"),
			a("git", "ls-remote", "--upload-pack=id", "x"), a("git", "branch", "-D", "x"), a("git", "branch", "--set-upstream-to=x"),
		}, [][]string{
			a("git", "log", "--oneline"), a("git", "diff", "--text"), a("git", "diff", "--no-textconv"), a("git", "diff", "--no-ext-diff"),
			a("git", "log", "--output-indicator-new=+"), a("git", "log", "--", "--output=x"), a("git", "status", "--porcelain"),
			a("git", "--no-pager", "log", "-1"), a("git", "show", "--stat", "HEAD"),
		}},
		{"uniq", [][]string{a("uniq", "in", "out"), a("uniq", "-c", "in", "out")}, [][]string{a("uniq", "-c", "in")}},
		{"base64", [][]string{a("base64", "-o", "f"), a("base64", "--output=f")}, [][]string{a("base64", "-d", "f"), a("base64", "-w0", "f")}},
		// Read-only by their manuals: no option writes a file or runs a
		// program (grep -f and wc --files0-from only read).
		{"read-only", nil, [][]string{
			a("cat", "-n", "f"), a("head", "-n", "5", "f"), a("tail", "-f", "f"), a("wc", "--files0-from=f"), a("cut", "-d:", "-f1", "f"),
			a("grep", "-f", "patterns", "f"), a("ls", "-la"), a("nl", "-ba", "f"), a("tr", "a", "b"), a("stat", "--printf=%s", "f"),
		}},
		// Not on the known-safe list at all: they write (sort -o, tee,
		// xxd -r with an outfile, diff --to-file is harmless but diff runs
		// nothing useful to skip), run programs (awk system(), less with
		// LESSOPEN or `!`, file -C compiles a magic file) or are
		// interactive.
		{"not-listed", [][]string{
			a("sort", "-o", "f", "g"), a("sort", "f"), a("tee", "f"), a("xxd", "-r", "in", "out"), a("xxd", "f"), a("awk", `BEGIN{system("id")}`),
			a("less", "f"), a("more", "f"), a("diff", "a", "b"), a("file", "-C", "-m", "x"), a("file", "f"), a("perl", "-ne", "print"),
		}, nil},
	} {
		for _, argv := range c.unsafe {
			if IsKnownSafe(argv, SafeOptions{}) {
				t.Errorf("%s: %q is known-safe; it writes or executes", c.tool, argv)
			}
		}
		for _, argv := range c.safe {
			if !IsKnownSafe(argv, SafeOptions{}) {
				t.Errorf("%s: %q is not known-safe; want safe", c.tool, argv)
			}
		}
	}
}
