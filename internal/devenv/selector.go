package devenv

import "k8s.io/apimachinery/pkg/labels"

func labelsSelector(s string) (labels.Selector, error) { return labels.Parse(s) }
