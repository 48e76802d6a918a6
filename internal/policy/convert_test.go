package policy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/policy"
	sdkpolicy "github.com/retryops/retry-operator/sdk/policy"
)

// TestTheDataPlaneReadsEveryPolicyField: the RetryPolicy spec (the CRD) and the sdk's policy.Spec
// (the config file's policy) have the same JSON shape, field for field: the same JSON names and
// options, kinds, pointers, lists and nested objects. A field added to one and not the other fails
// here, before policy.Spec panics on it.
func TestTheDataPlaneReadsEveryPolicyField(t *testing.T) {
	if diff := shapeDiff(reflect.TypeFor[retryv1alpha1.RetryPolicySpec](), reflect.TypeFor[sdkpolicy.Spec]()); len(diff) > 0 {
		t.Errorf("the CRD's RetryPolicySpec and the sdk's policy.Spec differ:\n%s", strings.Join(diff, "\n"))
	}
}

// TestShapeDiffNamesEveryDifference: the comparison above sees each kind of difference.
func TestShapeDiffNamesEveryDifference(t *testing.T) {
	type inner struct {
		A string `json:"a"`
		B int32  `json:"b"`
	}
	type innerOther struct {
		A string `json:"a"`
		C int32  `json:"c"`
	}
	type one struct {
		Same    *sdkpolicy.Duration `json:"same,omitempty"`
		Gone    string              `json:"gone"`
		Ptr     int32               `json:"ptr"`
		Kind    int32               `json:"kind"`
		Omit    string              `json:"omit"`
		Nested  inner               `json:"nested"`
		List    []inner             `json:"list"`
		Renamed string              `json:"renamed"`
	}
	type other struct {
		Same    *sdkpolicy.Duration `json:"same,omitempty"`
		Ptr     *int32              `json:"ptr"`
		Kind    int64               `json:"kind"`
		Omit    string              `json:"omit,omitempty"`
		Nested  innerOther          `json:"nested"`
		List    []innerOther        `json:"list"`
		Renamed string              `json:"renamedd"`
	}
	got := shapeDiff(reflect.TypeFor[one](), reflect.TypeFor[other]())
	want := []string{
		"gone: CRD string, sdk (absent)",
		"kind: CRD int32, sdk int64",
		"list[].b: CRD int32, sdk (absent)",
		"list[].c: CRD (absent), sdk int32",
		"nested.b: CRD int32, sdk (absent)",
		"nested.c: CRD (absent), sdk int32",
		"omit: CRD string, sdk string,omitempty",
		"ptr: CRD int32, sdk *int32",
		"renamed: CRD string, sdk (absent)",
		"renamedd: CRD (absent), sdk string",
	}
	if !slices.Equal(got, want) {
		t.Errorf("diff\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// shapeDiff lists, sorted, each JSON path whose shape differs between a (the CRD's) and b (the sdk's).
func shapeDiff(a, b reflect.Type) []string {
	sa, sb := map[string]string{}, map[string]string{}
	shape(a, "", sa)
	shape(b, "", sb)
	var diff []string
	for p := range sa {
		if sa[p] != sb[p] {
			diff = append(diff, fmt.Sprintf("%s: CRD %s, sdk %s", p, orAbsent(sa, p), orAbsent(sb, p)))
		}
	}
	for p := range sb {
		if _, ok := sa[p]; !ok {
			diff = append(diff, fmt.Sprintf("%s: CRD (absent), sdk %s", p, sb[p]))
		}
	}
	slices.Sort(diff)
	return diff
}

func orAbsent(m map[string]string, p string) string {
	if s, ok := m[p]; ok {
		return s
	}
	return "(absent)"
}

var marshaler = reflect.TypeFor[json.Marshaler]()

// shape records under out[path] the JSON shape of each field of t, by JSON path ("a.b", "a[].c").
// A type with its own JSON encoding (a duration) is a leaf described by the JSON kind of its zero
// value; the round trip below checks the encodings agree.
func shape(t reflect.Type, path string, out map[string]string) string {
	prefix := ""
	for t.Kind() == reflect.Pointer {
		prefix += "*"
		t = t.Elem()
	}
	switch {
	case t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler):
		data, err := json.Marshal(reflect.New(t).Interface())
		if err != nil {
			panic(err)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			panic(err)
		}
		return fmt.Sprintf("%sjson(%T)", prefix, v)
	case t.Kind() == reflect.Struct:
		for f := range t.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			s := shape(f.Type, p, out)
			if opts != "" {
				s += "," + opts
			}
			out[p] = s
		}
		return prefix + "object"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return prefix + "[]" + shape(t.Elem(), path+"[]", out)
	case t.Kind() == reflect.Map:
		return prefix + "map[" + t.Key().Kind().String() + "]" + shape(t.Elem(), path+"[]", out)
	default:
		return prefix + t.Kind().String()
	}
}

// TestEveryPolicyFieldCrossesIntoTheConfigUnchanged: fully populated RetryPolicy specs (every
// field set, by reflection, and the samples) become, through policy.Spec, the same JSON.
func TestEveryPolicyFieldCrossesIntoTheConfigUnchanged(t *testing.T) {
	specs := map[string]retryv1alpha1.RetryPolicySpec{}
	var full retryv1alpha1.RetryPolicySpec
	fill(reflect.ValueOf(&full).Elem(), new(int))
	specs["every field set"] = full
	samples, err := filepath.Glob(filepath.Join(envtestutil.RepoRoot(), "config", "samples", "retry_v1alpha1_retrypolicy_*.yaml"))
	if err != nil || len(samples) == 0 {
		t.Fatalf("no RetryPolicy samples: %v", err)
	}
	for _, f := range samples {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rp := &retryv1alpha1.RetryPolicy{}
		if err := yaml.UnmarshalStrict(data, rp); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		specs[filepath.Base(f)] = rp.Spec
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(policy.Spec(spec))
			if err != nil {
				t.Fatal(err)
			}
			var w, g any
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(w, g) {
				t.Errorf("the config's policy\n%s\nis not the RetryPolicy spec\n%s", got, want)
			}
		})
	}
	if data, _ := json.Marshal(full); strings.Contains(string(data), `""`) || strings.Contains(string(data), ":0") {
		t.Errorf("a field of the spec was left empty: %s", data)
	}
}

// fill sets every field under v to a distinct non-zero value (n counts them), lists to two items.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), n)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d", *n))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(*n) * int64(1500*time.Millisecond))
		} else {
			v.SetInt(int64(*n))
		}
	case reflect.Bool:
		v.SetBool(true)
	default:
		panic(fmt.Sprintf("fill: a %s field: teach fill its kind", v.Kind()))
	}
}
