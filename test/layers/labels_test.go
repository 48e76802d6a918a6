package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
)

// labelHome is the one package that may define the dead letters' labels and their sanitiser.
const labelHome = "api/deadletters/v1alpha1"

// TestOneHomeForTheLabelContract fails on a Go file (tests included) outside labelHome that spells a
// dead letter's label key as a string literal, or defines a label value sanitiser: a function from
// string to string that reads validation's label value rules (IsValidLabelValue,
// LabelValueMaxLength). Such a copy drifts: the console, the plugin and the API would select by
// labels that no longer agree.
func TestOneHomeForTheLabelContract(t *testing.T) {
	keys := []string{dlv1.LabelQueue, dlv1.LabelPipeline, dlv1.LabelReason, dlv1.LabelErrorType, dlv1.LabelState}
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case d.Name() == ".git" || d.Name() == "bin" || d.Name() == ".dev" || d.Name() == "testdata":
				return filepath.SkipDir
			case filepath.ToSlash(rel) == labelHome:
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, p := range labelContractCopies(f, keys) {
			t.Errorf("%s:%d: %s: use %s's instead", rel, fset.Position(p.pos).Line, p.what, labelHome)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type copyFound struct {
	pos  token.Pos
	what string
}

// labelContractCopies are the label keys spelled as literals in f and its label value sanitisers.
func labelContractCopies(f *ast.File, keys []string) []copyFound {
	var out []copyFound
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			for _, k := range keys {
				if containsKey(s, k) {
					out = append(out, copyFound{n.Pos(), "the label key " + strconv.Quote(k) + " spelled as a literal"})
				}
			}
		case *ast.BinaryExpr:
			// GroupName + "/state": the key built from the group's name
			sel, ok := n.X.(*ast.SelectorExpr)
			lit, isLit := n.Y.(*ast.BasicLit)
			if n.Op != token.ADD || !ok || sel.Sel.Name != "GroupName" || !isLit || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, k := range keys {
				if containsKey(dlv1.GroupName+s, k) {
					out = append(out, copyFound{n.Pos(), "the label key " + strconv.Quote(k) + " built from GroupName"})
				}
			}
		case *ast.FuncDecl:
			if sanitiser(n) {
				out = append(out, copyFound{n.Pos(), n.Name.Name + " sanitises label values"})
			}
		}
		return true
	})
	return out
}

// containsKey reports whether s holds the label key k whole: not as the start of a longer name.
func containsKey(s, k string) bool {
	for i := strings.Index(s, k); i >= 0; {
		end := i + len(k)
		if end == len(s) || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789-_.", rune(s[end])) {
			return true
		}
		j := strings.Index(s[end:], k)
		if j < 0 {
			return false
		}
		i = end + j
	}
	return false
}

// sanitiser reports whether fn is a func(string) string reading validation's label value rules.
func sanitiser(fn *ast.FuncDecl) bool {
	if fn.Body == nil || !stringToString(fn.Type) {
		return false
	}
	found := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && (sel.Sel.Name == "IsValidLabelValue" || sel.Sel.Name == "LabelValueMaxLength") {
			found = true
		}
		return !found
	})
	return found
}

func stringToString(ft *ast.FuncType) bool {
	isString := func(fl *ast.FieldList) bool {
		if fl == nil || len(fl.List) != 1 || len(fl.List[0].Names) > 1 {
			return false
		}
		id, ok := fl.List[0].Type.(*ast.Ident)
		return ok && id.Name == "string"
	}
	return isString(ft.Params) && isString(ft.Results)
}

// TestLabelContractCopiesAreFound: the check above finds a copy of each kind, and passes the
// package's own constants and other strings.
func TestLabelContractCopiesAreFound(t *testing.T) {
	keys := []string{dlv1.LabelQueue, dlv1.LabelState}
	src := `package x
import "k8s.io/apimachinery/pkg/util/validation"
var a = "GROUP/state=Resolved"
var b = "GROUP/queue"
var c = "/apis/GROUP/v1alpha1"
var d = "GROUP/queues"
var e = dlv1.GroupName + "/state"
var f = dlv1.GroupName + "/states"
func clean(s string) string {
	if len(s) > validation.LabelValueMaxLength { return s[:63] }
	return s
}
func check(s string) error { _ = validation.IsValidLabelValue(s); return nil }
`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", strings.ReplaceAll(src, "GROUP", dlv1.GroupName), 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range labelContractCopies(f, keys) {
		got = append(got, c.what)
	}
	literal := func(k string) string { return "the label key " + strconv.Quote(k) + " spelled as a literal" }
	want := []string{literal(dlv1.LabelState), literal(dlv1.LabelQueue), "the label key " + strconv.Quote(dlv1.LabelState) + " built from GroupName",
		"clean sanitises label values"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
