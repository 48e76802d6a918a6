package kafka

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// newCluster starts a single broker kfake cluster closed at test end.
func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// newAdmin returns an admin for conn from a fresh factory closed at test end.
func newAdmin(t *testing.T, conn Connection, opts ...FactoryOption) (Admin, *Factory) {
	t.Helper()
	f := NewFactory(append([]FactoryOption{WithRequestTimeout(20 * time.Second)}, opts...)...)
	t.Cleanup(f.Close)
	a, err := f.Admin(context.Background(), conn)
	if err != nil {
		t.Fatalf("Admin(%v): %v", conn, err)
	}
	return a, f
}

func plainConn(c *kfake.Cluster) Connection {
	return Connection{BootstrapServers: c.ListenAddrs(), ClientID: "test"}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes n records to topic/partition and waits for the acks.
func produce(t *testing.T, c *kfake.Cluster, topic string, counts map[int32]int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for p, n := range counts {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: []byte{byte(i)}})
		}
	}
	if err := cl.ProduceSync(ctxT(t), rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// requestCounter counts requests per key seen by the cluster. Control
// functions return handled=false, so the cluster still answers normally.
type requestCounter struct {
	mu     sync.Mutex
	counts map[kmsg.Key]int
	// listStart/listEnd split ListOffsets requests by the timestamp they
	// ask for (-2 = start, -1 = end).
	listStart, listEnd int
}

func countRequests(c *kfake.Cluster, keys ...kmsg.Key) *requestCounter {
	rc := &requestCounter{counts: make(map[kmsg.Key]int)}
	for _, k := range keys {
		c.ControlKey(int16(k), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.counts[k]++
			if lo, ok := req.(*kmsg.ListOffsetsRequest); ok && len(lo.Topics) > 0 && len(lo.Topics[0].Partitions) > 0 {
				switch lo.Topics[0].Partitions[0].Timestamp {
				case -2:
					rc.listStart++
				case -1:
					rc.listEnd++
				}
			}
			return nil, nil, false
		})
	}
	return rc
}

func (rc *requestCounter) reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.counts = make(map[kmsg.Key]int)
	rc.listStart, rc.listEnd = 0, 0
}

func (rc *requestCounter) get(k kmsg.Key) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.counts[k]
}

func (rc *requestCounter) starts() (int, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.listStart, rc.listEnd
}

// fakeClock is a manually advanced Clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		<-tick.C
	}
}

// testPKI is a CA with helpers to issue leaf certificates.
type testPKI struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
}

func newPKI(t *testing.T, name string) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{caCert: cert, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by the CA. Server certs get
// a 127.0.0.1 IP SAN and "localhost".
func (p *testPKI) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func (p *testPKI) serverTLS(t *testing.T) *tls.Config {
	t.Helper()
	certPEM, keyPEM := p.issue(t, "kfake", true)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// seedTopics wraps kfake.SeedTopics for readability.
func seedTopics(partitions int32, names ...string) kfake.Opt {
	return kfake.SeedTopics(partitions, names...)
}
