// Command healthcheck computes the health of Kubernetes objects the way GitOps tools do, so that the
// project's tests can check its status conventions against the real implementations:
//
//	healthcheck argocd SCRIPT.lua < objects.json   Argo CD's Lua health check runtime (gopher-lua, Argo CD's library set)
//	healthcheck kstatus < objects.json             kstatus, as Flux and cli-utils compute it
//
// The input is one JSON object or a JSON array of them; the output is a JSON array of {"status", "message"}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

type result struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// Argo CD accepts these health statuses from a script (pkg/apis/application/v1alpha1 HealthStatusCode).
var argoStatuses = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true,
}

// decode turns decoded JSON into Lua values the way Argo CD's util/lua does.
func decode(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case []any:
		table := l.CreateTable(len(v), 0)
		for _, item := range v {
			table.Append(decode(l, item))
		}
		return table
	case map[string]any:
		table := l.CreateTable(0, len(v))
		for key, item := range v {
			table.RawSetH(lua.LString(key), decode(l, item))
		}
		return table
	}
	return lua.LNil
}

// argocd runs a health script with the libraries Argo CD opens by default (no string library).
func argocd(script string, obj map[string]any) (result, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return result{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decode(l, obj))
	if err := l.DoString(script); err != nil {
		return result{}, err
	}
	table, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return result{}, fmt.Errorf("the script returned %s, not a table", l.Get(-1).Type())
	}
	out := result{Status: lua.LVAsString(table.RawGetString("status")), Message: lua.LVAsString(table.RawGetString("message"))}
	if !argoStatuses[out.Status] {
		return result{}, fmt.Errorf("the script returned status %q, which Argo CD does not know", out.Status)
	}
	return out, nil
}

func kstatus(obj map[string]any) (result, error) {
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return result{}, err
	}
	return result{Status: res.Status.String(), Message: res.Message}, nil
}

// objects decodes the input as client-go does (integers as int64): both tools read unstructured objects.
func objects(input []byte) ([]map[string]any, error) {
	var raw json.RawMessage
	if err := json.Unmarshal(input, &raw); err != nil {
		return nil, err
	}
	var list []json.RawMessage
	if len(raw) > 0 && raw[0] == '[' {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, err
		}
	} else {
		list = []json.RawMessage{raw}
	}
	out := make([]map[string]any, 0, len(list))
	for _, item := range list {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(item); err != nil {
			return nil, err
		}
		out = append(out, u.Object)
	}
	return out, nil
}

func run(args []string, stdin io.Reader) ([]result, error) {
	if len(args) < 1 || (args[0] == "argocd" && len(args) != 2) || (args[0] != "argocd" && args[0] != "kstatus") {
		return nil, fmt.Errorf("usage: healthcheck argocd SCRIPT.lua < objects.json | healthcheck kstatus < objects.json")
	}
	input, err := io.ReadAll(stdin)
	if err != nil {
		return nil, err
	}
	objs, err := objects(input)
	if err != nil {
		return nil, fmt.Errorf("reading objects: %w", err)
	}
	var script []byte
	if args[0] == "argocd" {
		if script, err = os.ReadFile(args[1]); err != nil {
			return nil, err
		}
	}
	results := make([]result, 0, len(objs))
	for i, obj := range objs {
		var res result
		if args[0] == "argocd" {
			res, err = argocd(string(script), obj)
		} else {
			res, err = kstatus(obj)
		}
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		results = append(results, res)
	}
	return results, nil
}

func main() {
	results, err := run(os.Args[1:], os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}
