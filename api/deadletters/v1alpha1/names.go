package v1alpha1

import "strconv"

// Name is the object name of the dead letter at partition and offset of queue's topic:
// "<queue>.<partition>.<offset>".
func Name(queue string, partition int32, offset int64) string {
	return queue + "." + strconv.FormatInt(int64(partition), 10) + "." + strconv.FormatInt(offset, 10)
}
