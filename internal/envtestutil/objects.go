package envtestutil

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// RepoPath joins elem to the repository's root.
func RepoPath(elem ...string) string {
	return filepath.Join(append([]string{RepoRoot()}, elem...)...)
}

// DecodeObjects decodes the YAML (or JSON) documents of data, leaving out empty ones.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}
