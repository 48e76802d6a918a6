package kafka

import (
	"bytes"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

// A CA bundle holds certificates and blank lines only: any other text (a password pasted above the
// certificate, a comment, a second file's key, a block cut short) is refused, with a message that
// says what and where without showing it, so that it never reaches the pods that read the bundle.
func TestCABundleRefusesAnythingButCertificates(t *testing.T) {
	pki := kafkatest.NewPKI(t, "bundle-ca")
	other := kafkatest.NewPKI(t, "other-ca")
	_, key := pki.Issue(t, "broker", true)
	brokenKey := "-----BEGIN PRIVATE KEY-----\nc2FzbC5wYXNzd29yZD1odW50ZXIy\n"
	cat := func(parts ...string) []byte { return []byte(strings.Join(parts, "")) }
	ca, ca2 := string(pki.CAPEM), string(other.CAPEM)
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"a password above the certificate":      {cat("sasl.password=hunter2\n", ca), "line 1: text outside a PEM block"},
		"a comment above the certificate":       {cat("# hunter2 CA\n", ca), "line 1: text outside a PEM block"},
		"text between two certificates":         {cat(ca, "hunter2\n", ca2), "text outside a PEM block"},
		"text after the last certificate":       {cat(ca, ca2, "hunter2"), "text outside a PEM block"},
		"a broken PRIVATE KEY block between":    {cat(ca, brokenKey, ca2), `PEM block "PRIVATE KEY" has no END line`},
		"a broken PRIVATE KEY block at the end": {cat(ca, brokenKey), `PEM block "PRIVATE KEY" has no END line`},
		"a private key":                         {cat(ca, string(key)), `unexpected PEM block "EC PRIVATE KEY"`},
		"bad base64 in a certificate": {cat("-----BEGIN CERTIFICATE-----\nhunter2!!\n-----END CERTIFICATE-----\n"),
			"certificate 1 (line 1) is not valid PEM"},
		"a certificate that does not parse":   {pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("hunter2")}), "certificate 1 (line 1)"},
		"a block of a type that is not shown": {cat(ca, "-----BEGIN HUNTER2-----\nAAAA\n-----END HUNTER2-----\n"), "line 11: unexpected PEM block of a type not shown (want CERTIFICATE)"},
		"nothing but blank lines":             {[]byte("\n \n"), "no PEM encoded certificate found"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := (&TLSConfig{CAPEM: tc.data}).Config()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Config() = %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "aHVudGVy") || strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("the error shows the bundle: %v", err)
			}
		})
	}
}

// CABundle gives back the certificates alone, encoded again: blank lines, CRLF line endings and
// spaces at the ends of lines are gone, and what comes out parses to the same certificates.
func TestCABundleEncodesTheCertificatesAgain(t *testing.T) {
	a, b := kafkatest.NewPKI(t, "a"), kafkatest.NewPKI(t, "b")
	want := append(append([]byte{}, a.CAPEM...), b.CAPEM...)
	messy := "\r\n\n" + strings.ReplaceAll(string(a.CAPEM), "\n", "  \r\n") + "\n\t\n" + string(b.CAPEM) + "\n\n"
	got, err := CABundle([]byte(messy))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("CABundle =\n%s\nwant\n%s", got, want)
	}
	if _, err := CABundle([]byte("x\n" + string(a.CAPEM))); err == nil {
		t.Error("CABundle accepted text before the certificate")
	}
}

// A bundle saved with a leading UTF-8 byte order mark (as some Windows editors and PowerShell
// write files) is the same bundle: the mark is no text a secret could hide in, and crypto/x509,
// OpenSSL and the JVM read such a file.
func TestCABundleTakesALeadingByteOrderMark(t *testing.T) {
	pki := kafkatest.NewPKI(t, "bom-ca")
	got, err := CABundle(append([]byte("\ufeff"), pki.CAPEM...))
	if err != nil {
		t.Fatalf("CABundle of a bundle with a byte order mark: %v", err)
	}
	if !bytes.Equal(got, pki.CAPEM) {
		t.Errorf("CABundle = %q, want the certificate alone", got)
	}
	if _, err := CABundle([]byte("\ufeff\ufeff" + string(pki.CAPEM))); err == nil {
		t.Error("a second mark is text outside a PEM block, and must be refused")
	}
}
