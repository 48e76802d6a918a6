package devenv

// A container's arguments as the process gets them: $(VAR) references expanded as a kubelet
// expands them, and, for programs that take their listen addresses as flags (the manager), those
// flags set to free loopback ports.

import (
	"regexp"
	"sort"
	"strings"
)

var envReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandArgs expands $(VAR) in args from env (KEY=value pairs) as a kubelet does: a reference to a
// variable the container does not define stays as it is, and $$ escapes a $.
func expandArgs(args, env []string) []string {
	vars := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	out := make([]string, len(args))
	for i, a := range args {
		if !strings.Contains(a, "$") {
			out[i] = a
			continue
		}
		var b strings.Builder
		for a != "" {
			switch {
			case strings.HasPrefix(a, "$$"):
				b.WriteByte('$')
				a = a[2:]
			case envReference.MatchString(a) && envReference.FindStringIndex(a)[0] == 0:
				m := envReference.FindStringSubmatch(a)
				if v, ok := vars[m[1]]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(m[0])
				}
				a = a[len(m[0]):]
			default:
				b.WriteByte(a[0])
				a = a[1:]
			}
		}
		out[i] = b.String()
	}
	return out
}

// setListenFlags sets each flag of ports (a name without dashes, to a port) to 127.0.0.1:<port> in
// args: the Pod's value replaced, or the flag added when the Pod leaves it at its default, which
// would otherwise bind the same port for every process on this machine.
func setListenFlags(args []string, ports map[string]string) []string {
	out := make([]string, 0, len(args)+len(ports))
	set := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		port, ok := ports[name]
		if !ok || !strings.HasPrefix(a, "-") {
			out = append(out, a)
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++ // --flag value: the value goes too
		}
		out = append(out, "--"+name+"=127.0.0.1:"+port)
		set[name] = true
	}
	for _, name := range sortedKeys(ports) {
		if !set[name] {
			out = append(out, "--"+name+"=127.0.0.1:"+ports[name])
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
