package lease_test

import (
	"go/ast"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// packageLayers reads the layers that doc.go's "Structure" section states:
// numbered items, each naming its files in parentheses. It returns each
// file's layer number and each layer's name.
func packageLayers(t *testing.T) (map[string]int, map[int]string) {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var section []string
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		text, isComment := strings.CutPrefix(line, "//")
		text = strings.TrimSpace(text)
		switch {
		case !isComment:
			in = false
		case strings.HasPrefix(text, "# "):
			in = text == "# Structure"
		case in:
			section = append(section, text)
		}
	}
	item := regexp.MustCompile(`(?:^| )(\d+)\. ([^(]+?) \(([^)]*)\)`)
	layerOf, names := map[string]int{}, map[int]string{}
	for _, m := range item.FindAllStringSubmatch(strings.Join(section, " "), -1) {
		n := len(names) + 1
		if m[1] != strconv.Itoa(n) {
			t.Fatalf("doc.go's Structure numbers its layers 1, 2, …: found %s where %d was due", m[1], n)
		}
		names[n] = m[2]
		for _, f := range strings.Split(strings.ReplaceAll(m[3], " and ", ", "), ",") {
			if f = strings.TrimSpace(f); f != "" {
				if prev, dup := layerOf[f]; dup {
					t.Fatalf("doc.go's Structure puts %s in layers %d and %d", f, prev, n)
				}
				layerOf[f] = n
			}
		}
	}
	if len(names) < 3 {
		t.Fatalf("doc.go has no Structure section listing the layers and their files (found %d layers)", len(names))
	}
	return layerOf, names
}

// TestFilesCallOnlyDownward checks the layer order doc.go states: every
// file of the package is in one layer, and no file uses a function or
// method declared in a file of a later layer (calls through an interface
// count as calls into the file that states the interface).
func TestFilesCallOnlyDownward(t *testing.T) {
	layerOf, names := packageLayers(t)
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || len(pkgs[0].Errors) > 0 {
		t.Fatalf("loading the package: %v", pkgs)
	}
	p := pkgs[0]
	var unplaced []string
	for _, f := range p.GoFiles {
		if _, ok := layerOf[filepath.Base(f)]; !ok && filepath.Base(f) != "doc.go" {
			unplaced = append(unplaced, filepath.Base(f))
		}
	}
	for f := range layerOf {
		if !containsBase(p.GoFiles, f) {
			t.Errorf("doc.go's Structure names %s, which is not a file of the package", f)
		}
	}
	if len(unplaced) > 0 {
		sort.Strings(unplaced)
		t.Errorf("doc.go's Structure places no layer for %s: add each to the layer it belongs to", strings.Join(unplaced, ", "))
	}
	var upward []string
	for _, f := range p.Syntax {
		from := filepath.Base(p.Fset.File(f.Pos()).Name())
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			fn, ok := p.TypesInfo.Uses[id].(*types.Func)
			if !ok || fn.Pkg() != p.Types {
				return true
			}
			to := filepath.Base(p.Fset.Position(fn.Pos()).Filename)
			if lf, lt := layerOf[from], layerOf[to]; lf != 0 && lt > lf {
				upward = append(upward, from+" ("+names[lf]+") calls "+fn.Name()+" of "+to+" ("+names[lt]+") at "+p.Fset.Position(id.Pos()).String())
			}
			return true
		})
	}
	for _, u := range upward {
		t.Error(u)
	}
}

func containsBase(files []string, base string) bool {
	for _, f := range files {
		if filepath.Base(f) == base {
			return true
		}
	}
	return false
}
