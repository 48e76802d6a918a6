package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

// Issue 30: the flags that let pods of pipelines on the default connection reach it: the manager's
// own client certificate (never the pods'), the consumer Secret's name, and a CA bundle small enough
// for every pipeline's ConfigMap.
func TestKafkaConsumerIdentityFlags(t *testing.T) {
	dir := t.TempDir()
	pki := kafkatest.NewPKI(t, "flags-ca")
	cert, key := pki.Issue(t, "retry-operator", false)
	write := func(name string, data []byte) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, certFile, keyFile := write("ca.crt", pki.CAPEM), write("tls.crt", cert), write("tls.key", key)
	o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{
		"--kafka-bootstrap-servers=kafka:9093", "--kafka-tls-ca-file=" + ca,
		"--kafka-tls-cert-file=" + certFile, "--kafka-tls-key-file=" + keyFile, "--kafka-consumer-secret={namespace}-consumer",
	})
	if err != nil {
		t.Fatal(err)
	}
	c := o.controllers
	if c.KafkaConsumerSecret != "{namespace}-consumer" {
		t.Errorf("consumer Secret: %q", c.KafkaConsumerSecret)
	}
	if tc := c.DefaultKafkaTLS; tc == nil || string(tc.CAPEM) != string(pki.CAPEM) || string(tc.CertPEM) != string(cert) || string(tc.KeyPEM) != string(key) {
		t.Errorf("TLS: %v", tc)
	}

	big := write("big.crt", []byte(strings.Repeat("x", 256<<10+1)))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kafka-tls-cert-file=" + certFile}, "--kafka-tls-cert-file and --kafka-tls-key-file go together"},
		{[]string{"--kafka-tls-key-file=" + keyFile}, "--kafka-tls-cert-file and --kafka-tls-key-file go together"},
		{[]string{"--kafka-tls-cert-file=" + certFile, "--kafka-tls-key-file=" + dir + "/missing"}, "--kafka-tls-key-file"},
		{[]string{"--kafka-tls-cert-file=" + keyFile, "--kafka-tls-key-file=" + certFile}, "default Kafka connection"},
		{[]string{"--kafka-tls-ca-file=" + big}, "262145 bytes, more than the 262144"},
		{[]string{"--kafka-consumer-secret=Not_A_Name"}, "is not a Secret name"},
	} {
		_, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("%v: the error shows the key: %v", tc.args, err)
		}
	}
}

// The CA bundle is copied into every pipeline's ConfigMap on the default connection, which every
// tenant reads: a file that also holds a private key (a combined ca.crt and ca.key, or a
// certificate with its key) would hand the key to all of them, and one that holds no PEM
// certificate (DER, a wrong file) would reach the pods corrupted. Both are refused at start (by the
// default connection's check), without showing the file.
func TestKafkaCABundleHoldsCertificatesOnly(t *testing.T) {
	dir := t.TempDir()
	pki := kafkatest.NewPKI(t, "bundle-ca")
	cert, key := pki.Issue(t, "broker", true)
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"the CA with a private key": {append(append([]byte{}, pki.CAPEM...), key...), `unexpected PEM block "EC PRIVATE KEY"`},
		"a certificate and its key": {append(append([]byte{}, cert...), key...), `unexpected PEM block "EC PRIVATE KEY"`},
		"DER, no PEM":               {[]byte{0x30, 0x82, 0x01, 0xff, 0xfe}, "no PEM encoded certificate found"},
	} {
		p := dir + "/" + strings.ReplaceAll(name, " ", "-")
		if err := os.WriteFile(p, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--kafka-bootstrap-servers=kafka:9093", "--kafka-tls-ca-file=" + p})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "BEGIN") {
			t.Errorf("%s: the error shows the file: %v", name, err)
		}
	}
	// What goes into the ConfigMaps is the certificates as parsed and encoded again, not the file's
	// bytes: blank lines and CRLF line endings are gone.
	bundle := append(append([]byte("\r\n\n"), bytes.ReplaceAll(pki.CAPEM, []byte("\n"), []byte("\r\n"))...), cert...)
	p := dir + "/bundle.crt"
	if err := os.WriteFile(p, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--kafka-bootstrap-servers=kafka:9093", "--kafka-tls-ca-file=" + p})
	if err != nil {
		t.Fatalf("a bundle of certificates: %v", err)
	}
	if got, want := string(o.controllers.DefaultKafkaTLS.CAPEM), string(pki.CAPEM)+string(cert); got != want {
		t.Errorf("the CA bundle copied to the pipelines' ConfigMaps is\n%q\nwant the certificates encoded again\n%q", got, want)
	}
}

// Text outside the PEM blocks of the CA bundle, which would be copied to every tenant, is refused
// at start with a message naming the flag and the line, never the text.
func TestKafkaCABundleRefusesTextOutsideCertificates(t *testing.T) {
	dir := t.TempDir()
	a, b := kafkatest.NewPKI(t, "a"), kafkatest.NewPKI(t, "b")
	for name, data := range map[string]string{
		"a password above the certificate":   "sasl.password=hunter2\n" + string(a.CAPEM),
		"a broken PRIVATE KEY block between": string(a.CAPEM) + "-----BEGIN PRIVATE KEY-----\nhunter2\n" + string(b.CAPEM),
	} {
		p := dir + "/" + strings.ReplaceAll(name, " ", "-")
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--kafka-bootstrap-servers=kafka:9093", "--kafka-tls-ca-file=" + p})
		if err == nil || !strings.Contains(err.Error(), "--kafka-tls-ca-file "+p+": line ") {
			t.Errorf("%s: %v, want the flag, the file and the line refused", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the file: %v", name, err)
		}
	}
}
