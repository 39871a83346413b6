package main

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// specDir holds the specification the code cites, relative to the root.
const specDir = "docs/spec"

// specRef matches a citation of the spec in a comment: the word spec and
// one or more quoted headings joined by commas or "and", as in
// (spec "Lifecycle tracing" and "Stages").
var specRef = regexp.MustCompile(`\bspec ("[^"]+"(?:(?:, | and )"[^"]+")*)`)

var quoted = regexp.MustCompile(`"([^"]+)"`)

// specReference is one cited heading and where its citation starts.
type specReference struct {
	file    string
	line    int
	heading string
}

func (r specReference) String() string {
	return r.file + ":" + strconv.Itoa(r.line) + `: spec "` + r.heading + `"`
}

// specReferences returns the headings cited in the comments of src. A
// comment group is read as one text, so a citation may wrap lines.
func specReferences(name string, src []byte) ([]specReference, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var refs []specReference
	for _, cg := range f.Comments {
		// The group's lines without comment markers, joined by spaces;
		// offsets[i] is where line i starts in the joined text.
		var joined strings.Builder
		var offsets, lineNos []int
		for _, c := range cg.List {
			text := strings.TrimPrefix(c.Text, "//")
			if strings.HasPrefix(c.Text, "/*") {
				text = strings.TrimSuffix(strings.TrimPrefix(c.Text, "/*"), "*/")
			}
			first := fset.Position(c.Slash).Line
			for i, l := range strings.Split(text, "\n") {
				offsets = append(offsets, joined.Len())
				lineNos = append(lineNos, first+i)
				joined.WriteString(strings.TrimSpace(l))
				joined.WriteByte(' ')
			}
		}
		text := joined.String()
		for _, m := range specRef.FindAllStringSubmatchIndex(text, -1) {
			i := sort.SearchInts(offsets, m[0]+1) - 1
			for _, q := range quoted.FindAllStringSubmatch(text[m[2]:m[3]], -1) {
				refs = append(refs, specReference{file: name, line: lineNos[i], heading: normalize(q[1])})
			}
		}
	}
	return refs, nil
}

func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// specHeadings returns the Markdown headings of every page of dir.
func specHeadings(t *testing.T, dir string) map[string]string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(dir, "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "no pages in %s", dir)
	headings := map[string]string{}
	for _, page := range pages {
		f, err := os.Open(page)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		fence := false
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "```") {
				fence = !fence
				continue
			}
			if fence {
				continue
			}
			if h := strings.TrimLeft(line, "#"); h != line && strings.HasPrefix(h, " ") {
				headings[normalize(h)] = filepath.Base(page)
			}
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
	}
	return headings
}

// goFiles returns every Go file of the checkout (generated code included:
// its comments come from the protos and queries), relative to root.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

// Every citation of the spec in a Go comment names a heading of docs/spec, so
// a reader can follow it and a renamed heading cannot leave code pointing
// nowhere.
func TestSpecReferencesResolve(t *testing.T) {
	t.Parallel()
	root, err := repoRoot()
	require.NoError(t, err)
	headings := specHeadings(t, filepath.Join(root, specDir))

	var refs []specReference
	for _, file := range goFiles(t, root) {
		src, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		if !strings.Contains(string(src), "spec ") {
			continue
		}
		found, err := specReferences(file, src)
		require.NoError(t, err, file)
		refs = append(refs, found...)
	}
	require.NotEmpty(t, refs, "found no spec references at all: is the pattern still right?")

	var broken []string
	for _, r := range refs {
		if _, ok := headings[r.heading]; !ok {
			broken = append(broken, r.String())
		}
	}
	if len(broken) > 0 {
		t.Fatalf("%d spec references name no heading of %s/*.md (fix the comment, or the heading if the spec's text moved):\n\t%s",
			len(broken), specDir, strings.Join(broken, "\n\t"))
	}
}

func TestSpecReferencesParse(t *testing.T) {
	t.Parallel()
	src := `// Package p is here (spec "Acquisition loop") with the limiter's
// admission (spec "Concurrent agent
// limiter").
package p

// x cites two (spec "Lifecycle tracing" and "Stages"), and a list
// (spec "Parts endpoint", "Relay mechanism"), then a plain "quote".
var x = "spec \"Not a comment\""

/* A block comment (spec "Turn span
   lifecycle", Interrupt). */
var y = 1
`
	refs, err := specReferences("p.go", []byte(src))
	require.NoError(t, err)
	var got []string
	for _, r := range refs {
		got = append(got, r.String())
	}
	require.Equal(t, []string{
		`p.go:1: spec "Acquisition loop"`,
		`p.go:2: spec "Concurrent agent limiter"`,
		`p.go:6: spec "Lifecycle tracing"`,
		`p.go:6: spec "Stages"`,
		`p.go:7: spec "Parts endpoint"`,
		`p.go:7: spec "Relay mechanism"`,
		`p.go:10: spec "Turn span lifecycle"`,
	}, got)
}

// The state machine's test table is the spec's, byte for byte.
func TestTransitionsTableIsTheSpecs(t *testing.T) {
	t.Parallel()
	root, err := repoRoot()
	require.NoError(t, err)
	spec, err := os.ReadFile(filepath.Join(root, specDir, "transitions.tsv"))
	require.NoError(t, err)
	test, err := os.ReadFile(filepath.Join(root, "pkg/chatstate/testdata/transitions.tsv"))
	require.NoError(t, err)
	require.Equal(t, string(spec), string(test), "pkg/chatstate/testdata/transitions.tsv differs from %s/transitions.tsv", specDir)
}
