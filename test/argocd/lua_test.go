// Package argocd_test runs the Argo CD health checks of config/argocd the way Argo CD runs them
// (util/lua in argoproj/argo-cd): gopher-lua, the object as the `obj` global, a table returned.
package argocd_test

import (
	"encoding/json"
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// sandbox is the set of Lua libraries a script sees.
type sandbox string

const (
	// builtIn is what Argo CD gives its built-in scripts and its own health tests: every library.
	builtIn sandbox = "built-in"
	// configMap is what Argo CD gives a script from argocd-cm without useOpenLibs: package, base
	// and table only (and a restricted os, which these scripts do not use, so it is left out).
	configMap sandbox = "argocd-cm"
)

// healthStatus is what a health script returns (gitops-engine's health.HealthStatus).
type healthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// validStatuses are the statuses Argo CD accepts; any other becomes Unknown.
var validStatuses = map[string]bool{"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true}

// runHealth runs script against obj in sb.
func runHealth(script string, obj map[string]any, sb sandbox) (healthStatus, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: sb == configMap})
	defer l.Close()
	if sb == configMap {
		for name, open := range map[string]lua.LGFunction{lua.LoadLibName: lua.OpenPackage, lua.BaseLibName: lua.OpenBase, lua.TabLibName: lua.OpenTable} {
			if err := l.CallByParam(lua.P{Fn: l.NewFunction(open), NRet: 0, Protect: true}, lua.LString(name)); err != nil {
				return healthStatus{}, err
			}
		}
	} else {
		l.SetGlobal(lua.OsLibName, lua.LNil)
	}
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return healthStatus{}, err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return healthStatus{}, fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	var hs healthStatus
	for field, dst := range map[string]*string{"status": &hs.Status, "message": &hs.Message} {
		switch v := ret.RawGetString(field).(type) {
		case lua.LString:
			*dst = string(v)
		case *lua.LNilType:
		default:
			return healthStatus{}, fmt.Errorf("%s is a %s, not a string", field, v.Type())
		}
	}
	if !validStatuses[hs.Status] {
		return healthStatus{}, fmt.Errorf("invalid health status %q", hs.Status)
	}
	return hs, nil
}

// toLua converts a decoded object as Argo CD's decodeValue does: numbers of any Go type become Lua
// numbers, json.Number a string, lists sequences, maps tables; anything else nil.
func toLua(l *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case bool:
		return lua.LBool(x)
	case string:
		return lua.LString(x)
	case float64:
		return lua.LNumber(x)
	case int64:
		return lua.LNumber(x)
	case int32:
		return lua.LNumber(x)
	case int:
		return lua.LNumber(x)
	case json.Number:
		return lua.LString(x)
	case []any:
		t := l.CreateTable(len(x), 0)
		for _, item := range x {
			t.Append(toLua(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(x))
		for k, item := range x {
			t.RawSetH(lua.LString(k), toLua(l, item))
		}
		return t
	}
	return lua.LNil
}

// truncated reports whether want is got cut by the script's bound (512 bytes and "...").
func truncated(want, got string) bool {
	cut, ok := strings.CutSuffix(want, "...")
	return ok && len(cut) <= 512 && len(got) > 512 && strings.HasPrefix(got, cut)
}
