package kafka

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// CABundle reads data as a CA bundle and returns its certificates encoded again, PEM block after
// PEM block with nothing between them. A bundle holds CERTIFICATE blocks, each one certificate
// that crypto/x509 parses, and blank lines; anything else (text before, between or after the blocks,
// a block of another type, a block with no END line, headers) is refused, because the bundle is
// copied to every pipeline that uses it and such text is often a secret pasted in the wrong place.
// The error says what was found and on which line, never the text itself.
func CABundle(data []byte) ([]byte, error) {
	certs, err := parseCABundle(data)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, c := range certs {
		// Writing to a bytes.Buffer never fails.
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes(), nil
}

// knownTypes are the PEM types the errors may repeat, those of the files a CA bundle is confused
// with; any other BEGIN line is reported without its text, which could be anything.
var knownTypes = map[string]bool{
	"CERTIFICATE": true, "TRUSTED CERTIFICATE": true, "CERTIFICATE REQUEST": true, "X509 CRL": true,
	"PRIVATE KEY": true, "RSA PRIVATE KEY": true, "EC PRIVATE KEY": true, "ENCRYPTED PRIVATE KEY": true,
	"OPENSSH PRIVATE KEY": true, "DSA PRIVATE KEY": true, "PUBLIC KEY": true, "RSA PUBLIC KEY": true,
	"EC PARAMETERS": true, "DH PARAMETERS": true, "PGP PUBLIC KEY BLOCK": true, "PGP PRIVATE KEY BLOCK": true,
}

const pemBegin, pemEnd, pemDashes = "-----BEGIN ", "-----END ", "-----"

// parseCABundle parses data line by line (LF or CRLF, spaces at the ends of lines and a leading byte
// order mark ignored): outside a block only blank lines; a block from its BEGIN line to the END line
// of the same type.
func parseCABundle(data []byte) ([]*x509.Certificate, error) {
	// A leading UTF-8 byte order mark (some Windows editors write one) is no text.
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if !bytes.Contains(data, []byte(pemBegin)) {
		return nil, errors.New("no PEM encoded certificate found")
	}
	var certs []*x509.Certificate
	lines := bytes.Split(data, []byte("\n"))
	for i := 0; i < len(lines); i++ {
		line := bytes.TrimRight(lines[i], " \t\r")
		if len(bytes.TrimLeft(line, " \t")) == 0 {
			continue
		}
		typ, ok := beginLine(line)
		if !ok {
			return nil, fmt.Errorf("line %d: text outside a PEM block (not shown); a CA bundle holds CERTIFICATE blocks only", i+1)
		}
		start := i
		shown := "PEM block of a type not shown"
		if knownTypes[typ] {
			shown = fmt.Sprintf("PEM block %q", typ)
		}
		end := -1
		for j := i + 1; j < len(lines); j++ {
			l := bytes.TrimRight(lines[j], " \t\r")
			if string(l) == pemEnd+typ+pemDashes {
				end = j
				break
			}
			if _, begin := beginLine(l); begin {
				break
			}
		}
		if end < 0 {
			return nil, fmt.Errorf("line %d: %s has no END line", start+1, shown)
		}
		i = end
		if typ != "CERTIFICATE" {
			return nil, fmt.Errorf("line %d: unexpected %s (want CERTIFICATE); a CA bundle holds certificates only", start+1, shown)
		}
		n := len(certs) + 1
		var chunk bytes.Buffer
		for _, l := range lines[start : end+1] {
			chunk.Write(bytes.TrimRight(l, " \t\r"))
			chunk.WriteByte('\n')
		}
		block, rest := pem.Decode(chunk.Bytes())
		if block == nil || len(bytes.TrimSpace(rest)) > 0 {
			return nil, fmt.Errorf("certificate %d (line %d) is not valid PEM (bad base64)", n, start+1)
		}
		if len(block.Headers) > 0 {
			return nil, fmt.Errorf("certificate %d (line %d) has PEM headers, which a certificate never has", n, start+1)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d (line %d): %w", n, start+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM encoded certificate found")
	}
	return certs, nil
}

// beginLine returns the type of a PEM BEGIN line.
func beginLine(line []byte) (typ string, ok bool) {
	rest, ok := bytes.CutPrefix(line, []byte(pemBegin))
	if !ok {
		return "", false
	}
	t, ok := bytes.CutSuffix(rest, []byte(pemDashes))
	return string(t), ok
}
