// Command fakedispatcher stands in for the dispatcher in the runner's test: it reads its config file,
// serves /readyz on the configured health address, and serves /secret with the content of the file
// the config names, proving that mounted paths were remapped.
package main

import (
	"encoding/json"
	"net/http"
	"os"
)

func main() {
	b, err := os.ReadFile(os.Getenv("RETRYOPS_CONFIG"))
	if err != nil {
		panic(err)
	}
	var cfg struct {
		Listen struct {
			HealthAddress string `json:"healthAddress"`
		} `json:"listen"`
		SecretFile string `json:"secretFile"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		panic(err)
	}
	http.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	http.HandleFunc("/secret", func(w http.ResponseWriter, _ *http.Request) {
		s, err := os.ReadFile(cfg.SecretFile)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		_, _ = w.Write(s)
	})
	http.HandleFunc("/env", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(os.Getenv("GREETING"))) })
	if err := http.ListenAndServe(cfg.Listen.HealthAddress, nil); err != nil {
		panic(err)
	}
}
