package dispatchertest

import (
	"math"
	"slices"
)

// KSUniform is the Kolmogorov-Smirnov test of xs against U(lo, hi): the statistic D and its p-value
// (the asymptotic Kolmogorov distribution with Stephens' correction for finite n).
func KSUniform(xs []float64, lo, hi float64) (d, p float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := float64(len(s))
	for i, x := range s {
		f := min(max((x-lo)/(hi-lo), 0), 1)
		d = max(d, math.Abs(f-float64(i)/n), math.Abs(float64(i+1)/n-f))
	}
	l := (math.Sqrt(n) + 0.12 + 0.11/math.Sqrt(n)) * d
	for k := 1; k <= 100; k++ {
		p += 2 * math.Pow(-1, float64(k-1)) * math.Exp(-2*float64(k*k)*l*l)
	}
	return d, min(max(p, 0), 1)
}
