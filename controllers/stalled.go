package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// setStalled sets the kstatus Stalled condition from the problems a reconcile met: True, with the
// reason of the first user error (a problem that waits for a change to the spec, or to a Secret it
// names) and the messages of all of them, when there is one; removed otherwise, as kstatus and Flux
// expect of an abnormal-true condition. kstatus then computes Failed for a stalled resource at once,
// and Current for a Ready one.
func setStalled(conditions *[]metav1.Condition, generation int64, ps problems) {
	var user problems
	for _, p := range ps {
		if p.Kind == problemUser {
			user = append(user, p)
		}
	}
	if len(user) == 0 {
		meta.RemoveStatusCondition(conditions, retryv1alpha1.ConditionStalled)
		return
	}
	c := user.condition(retryv1alpha1.ConditionStalled, generation, "", "")
	c.Status = metav1.ConditionTrue
	meta.SetStatusCondition(conditions, c)
}
