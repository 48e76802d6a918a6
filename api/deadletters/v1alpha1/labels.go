package v1alpha1

import (
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels of a DeadLetter, for label selectors (kubectl get deadletters -l ...). Their values are the
// fields' sanitised by LabelValue; Labels builds them, the one place that does.
const (
	// LabelQueue is the DeadLetterQueue's name.
	LabelQueue = GroupName + "/queue"
	// LabelPipeline is the name (without namespace) of the pipeline that dead-lettered it.
	LabelPipeline = GroupName + "/pipeline"
	// LabelReason is why it was dead-lettered (max_retries_exceeded, non_retryable, ...).
	LabelReason = GroupName + "/reason"
	// LabelErrorType is the type of the last error.
	LabelErrorType = GroupName + "/error-type"
	// LabelState is its state in the record of decisions (Pending, Replayed, Resolved, Ignored).
	LabelState = GroupName + "/state"
)

// Labels are the labels of a dead letter of queue: pipeline is "<namespace>/<name>" (its label is
// the name), the state's name is a label value as it is.
func Labels(queue, pipeline, reason, errorType string, state State) map[string]string {
	if i := strings.LastIndexByte(pipeline, '/'); i >= 0 {
		pipeline = pipeline[i+1:]
	}
	return map[string]string{
		LabelQueue:     LabelValue(queue),
		LabelPipeline:  LabelValue(pipeline),
		LabelReason:    LabelValue(reason),
		LabelErrorType: LabelValue(errorType),
		LabelState:     string(state),
	}
}

// LabelValue sanitises s into a valid label value: characters other than [A-Za-z0-9._-] become '_',
// it is cut to 63 characters, and non-alphanumeric ends are trimmed ("" when nothing is left). Two
// values may share a label value: select them whole with the field selectors (FieldQueue, ...).
func LabelValue(s string) string {
	if len(s) <= validation.LabelValueMaxLength && len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	b := make([]byte, 0, min(len(s), validation.LabelValueMaxLength))
	for _, r := range s {
		if len(b) == validation.LabelValueMaxLength {
			break
		}
		if r < utf8.RuneSelf && (alnum(byte(r)) || r == '.' || r == '_' || r == '-') {
			b = append(b, byte(r))
		} else {
			b = append(b, '_')
		}
	}
	for len(b) > 0 && !alnum(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && !alnum(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return string(b)
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
