package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTheDataPlaneModuleIsDocumented fails on an exported name of sdk/ (test files excluded) without a
// doc comment, and on a package of it without a package comment: the module is what users import, and
// godoc is where they read it.
func TestTheDataPlaneModuleIsDocumented(t *testing.T) {
	root := "../.."
	packages := map[string]bool{} // directory -> has a package comment
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, "sdk"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) || f.Name.Name == "main" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		packages[dir] = packages[dir] || f.Doc != nil
		for _, u := range undocumented(f) {
			t.Errorf("%s:%d: %s has no doc comment", filepath.ToSlash(rel), fset.Position(u.pos).Line, u.what)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(packages) == 0 {
		t.Fatal("no package under sdk/")
	}
	for dir, documented := range packages {
		if !documented {
			t.Errorf("%s has no package comment (doc.go or the package clause of one file)", dir)
		}
	}
}

// undocumented returns f's exported names without a doc comment: types, functions, methods of
// exported types, constants and variables. A group's comment counts for the names of a const or var
// block, and a line comment for a name in one.
func undocumented(f *ast.File) []copyFound {
	var out []copyFound
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if !decl.Name.IsExported() || decl.Doc != nil {
				continue
			}
			if decl.Recv == nil {
				out = append(out, copyFound{decl.Pos(), decl.Name.Name})
			} else if recv := receiverType(decl.Recv); ast.IsExported(recv) {
				out = append(out, copyFound{decl.Pos(), recv + "." + decl.Name.Name})
			}
		case *ast.GenDecl:
			// An unparenthesised declaration's comment is the declaration's own.
			grouped := decl.Lparen.IsValid()
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					if spec.Name.IsExported() && spec.Doc == nil && (grouped || decl.Doc == nil) {
						out = append(out, copyFound{spec.Pos(), spec.Name.Name})
					}
				case *ast.ValueSpec:
					if spec.Doc != nil || spec.Comment != nil || decl.Doc != nil {
						continue
					}
					for _, n := range spec.Names {
						if n.IsExported() {
							out = append(out, copyFound{n.Pos(), n.Name})
						}
					}
				}
			}
		}
	}
	return out
}

// receiverType is the name of a method's receiver type, without pointer or type parameters.
func receiverType(recv *ast.FieldList) string {
	if len(recv.List) == 0 {
		return ""
	}
	x := recv.List[0].Type
	for {
		switch t := x.(type) {
		case *ast.StarExpr:
			x = t.X
		case *ast.IndexExpr:
			x = t.X
		case *ast.IndexListExpr:
			x = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// TestUndocumentedNamesAreFound: the check finds each kind of exported name without a comment and
// passes documented ones, unexported ones, methods of unexported types and a commented const block.
func TestUndocumentedNamesAreFound(t *testing.T) {
	src := `package p

// Documented is.
type Documented struct{}

type Bare struct{}

type (
	// Grouped is.
	Grouped int
	GroupedBare int
)

type unexported struct{}

// Do does.
func Do() {}

func Run() {}

func (Documented) M() {}

func (*Bare) P() {}

func (g *List[T]) Generic() {}

func (unexported) Hidden() {}

// Mode is a block of constants; the comment covers them all.
const (
	A = 1
	B = 2
)

const (
	C = 1 // C is.
	D = 2
	e = 3
)

var V, W int

// X is.
var X int
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range undocumented(f) {
		got = append(got, u.what)
	}
	want := []string{"Bare", "GroupedBare", "Run", "Documented.M", "Bare.P", "List.Generic", "D", "V", "W"}
	if !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
}
