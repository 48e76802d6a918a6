// Command kafka runs an embedded Kafka-protocol broker (franz-go's kfake) as a local process, for
// `make dev` and for tests that need a broker that outlives the processes using it. It speaks the real
// Kafka protocol, so the operator and the dispatchers use it exactly as they would Apache Kafka.
//
//	go run ./hack/kafka --port 9092 --data-dir .dev/kafka
//
// With --data-dir, topics, records, committed offsets and ACLs survive a restart.
//
// Secured, as a production listener is: --tls-cert-file and --tls-key-file serve TLS (with
// --tls-client-ca-file, clients must present a certificate that CA signed); --sasl-users-file names
// a JSON file of SASL users (passwords never go on the command line; the file must be readable by
// its owner only, and so is --data-dir then made), and --acls enforces ACLs on
// every user that is not a superuser; --auth-log appends, one JSON line each, the user of every
// SASL authentication the broker sees, so tests can tell who connected from the broker's side.
// --requests-addr serves the number of requests received per key (controllers' scale benchmark
// runs the broker in a process of its own, so that its own heap is the manager's alone).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// user is one entry of --sasl-users-file.
type user struct {
	Mechanism string `json:"mechanism"`
	User      string `json:"user"`
	Password  string `json:"password"`
	Superuser bool   `json:"superuser,omitempty"`
}

func main() {
	port := flag.Int("port", 9092, "Port to listen on (127.0.0.1).")
	dataDir := flag.String("data-dir", "", "Directory that keeps the broker's state across restarts; empty keeps it in memory.")
	partitions := flag.Int("default-partitions", 3, "Partitions of topics created without a count.")
	certFile := flag.String("tls-cert-file", "", "PEM server certificate: serve TLS (with --tls-key-file).")
	keyFile := flag.String("tls-key-file", "", "PEM key of --tls-cert-file.")
	clientCAFile := flag.String("tls-client-ca-file", "", "PEM CA bundle: require client certificates it signed (mutual TLS).")
	usersFile := flag.String("sasl-users-file", "", `JSON list of SASL users, [{"mechanism":"SCRAM-SHA-512","user":"u","password":"p","superuser":true}]: require SASL. They replace the users a --data-dir kept; users added over the protocol last until the next start.`)
	acls := flag.Bool("acls", false, "Enforce ACLs on every SASL user that is not a superuser (needs --sasl-users-file with a superuser to create them).")
	authLog := flag.String("auth-log", "", `File that receives {"user":"..."} for every SASL authentication, one JSON line each.`)
	requestsAddr := flag.String("requests-addr", "", "Address (127.0.0.1:0 picks a port) serving the count of requests received per key over HTTP: GET /counts, /created, /list-offsets.")
	flag.Parse()

	opts, err := options(*port, *dataDir, *partitions, *certFile, *keyFile, *clientCAFile, *usersFile, *acls)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka: starting the broker:", err)
		os.Exit(1)
	}
	if *authLog != "" {
		f, err := os.OpenFile(*authLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kafka:", err)
			os.Exit(1)
		}
		defer f.Close()
		logAuthentications(cluster, f)
	}
	if *requestsAddr != "" {
		ln, err := net.Listen("tcp", *requestsAddr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kafka: --requests-addr:", err)
			os.Exit(1)
		}
		defer countRequests(cluster).serve(ln).Close()
		fmt.Printf("kafka: requests on http://%s\n", ln.Addr())
	}
	fmt.Printf("kafka: listening on %s (tls: %t, sasl: %t, acls: %t)\n", cluster.ListenAddrs()[0], *certFile != "", *usersFile != "", *acls)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	cluster.Close()
	fmt.Println("kafka: stopped")
}

func options(port int, dataDir string, partitions int, certFile, keyFile, clientCAFile, usersFile string, acls bool) ([]kfake.Opt, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.DefaultNumPartitions(partitions),
		kfake.ClusterID("retryops-dev"),
	}
	if certFile != "" || keyFile != "" {
		cfg, err := serverTLS(certFile, keyFile, clientCAFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kfake.TLS(cfg))
	} else if clientCAFile != "" {
		return nil, errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
	}
	if usersFile != "" {
		users, err := readUsers(usersFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kfake.EnableSASL())
		for _, u := range users {
			if u.Superuser {
				opts = append(opts, kfake.Superuser(u.Mechanism, u.User, u.Password))
			} else {
				opts = append(opts, kfake.User(u.Mechanism, u.User, u.Password))
			}
		}
		// kfake replaces the users it was started with by those its data dir kept: the file wins.
		if dataDir != "" {
			if err := os.Remove(filepath.Join(dataDir, "sasl.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	if acls {
		if usersFile == "" {
			return nil, errors.New("--acls needs --sasl-users-file")
		}
		opts = append(opts, kfake.EnableACLs())
	}
	if dataDir != "" {
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, err
		}
		// kfake keeps its users there (sasl.json, mode 0644): PLAIN passwords as they are and SCRAM's
		// salted passwords, which let anyone holding them authenticate.
		if usersFile != "" {
			if err := os.Chmod(dataDir, 0o700); err != nil {
				return nil, err
			}
		}
		opts = append(opts, kfake.DataDir(dataDir))
	}
	return opts, nil
}

func serverTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file and --tls-key-file: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca-file %s holds no PEM certificate", clientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func readUsers(path string) ([]user, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--sasl-users-file: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--sasl-users-file %s holds passwords but others may read it (mode %04o): chmod 600 it", path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--sasl-users-file: %w", err)
	}
	var users []user
	if err := json.Unmarshal(b, &users); err != nil {
		return nil, fmt.Errorf("--sasl-users-file %s: %w", path, err)
	}
	for _, u := range users {
		switch u.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return nil, fmt.Errorf("--sasl-users-file %s: user %q: mechanism %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", path, u.User, u.Mechanism)
		}
		if u.User == "" || u.Password == "" {
			return nil, fmt.Errorf("--sasl-users-file %s: every user needs a name and a password", path)
		}
	}
	return users, nil
}
