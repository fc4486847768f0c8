package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// writePKI makes a CA and one certificate for 127.0.0.1 usable by server and client, as PEM files.
func writePKI(t *testing.T, dir string) bus.TLSFiles {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "skein test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "skein mesh"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := bus.TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	for path, block := range map[string]*pem.Block{f.CA: {Type: "CERTIFICATE", Bytes: caDER}, f.Cert: {Type: "CERTIFICATE", Bytes: der}, f.Key: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestTLS: with mesh.tls the embedded server speaks only TLS and asks for a client certificate
// signed by the CA; a client with the block connects, one without it or without a certificate
// does not.
func TestTLS(t *testing.T) {
	srv, pki, creds, ctx := mutualTLSServer(t)
	id := bus.WithCreds(auth.File(creds, auth.Admin))

	c, err := bus.Connect(ctx, srv.URL(), "tls", 5*time.Second, id, bus.WithTLS(pki))
	if err != nil {
		t.Fatalf("TLS client: %v", err)
	}
	defer c.Close()
	if !c.NC.TLSRequired() {
		t.Error("connection is not TLS")
	}
	if err := bus.Provision(ctx, c.JS, protocol.NewNames(""), bus.DefaultLimits()); err != nil {
		t.Fatalf("provision over TLS: %v", err)
	}

	if c, err := bus.Connect(ctx, srv.URL(), "plain", time.Second, id); err == nil {
		c.Close()
		t.Error("a plain-text client connected to a TLS server")
	}
	if c, err := bus.Connect(ctx, srv.URL(), "no-cert", time.Second, id, bus.WithTLS(bus.TLSFiles{CA: pki.CA})); err == nil {
		c.Close()
		t.Error("a client without a certificate connected to a server that verifies them")
	}
	other := writePKI(t, t.TempDir())
	if c, err := bus.Connect(ctx, srv.URL(), "wrong-ca", time.Second, id, bus.WithTLS(other)); err == nil {
		c.Close()
		t.Error("a client trusting another CA connected")
	}
}

// mutualTLSServer starts an embedded server that requires client certificates, with its PKI,
// the folder of its credentials and a context for the test.
func mutualTLSServer(t *testing.T) (*embedded.Server, bus.TLSFiles, string, context.Context) {
	t.Helper()
	pki := writePKI(t, t.TempDir())
	creds := t.TempDir()
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", CredsDir: creds, Names: protocol.NewNames(""), TLS: pki})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return srv, pki, creds, ctx
}

// A service in the server's own process connects in memory: no TLS (nothing leaves the
// process), but the same credentials and permissions as over the socket. (A connection the
// server refuses is not tried here: over an in-memory pipe the refusal takes the server's 10 s
// write deadline to arrive.)
func TestInProcessConnectionsKeepTheirIdentity(t *testing.T) {
	srv, _, creds, ctx := mutualTLSServer(t)

	admin, err := bus.Connect(ctx, srv.URL(), "in-process", 5*time.Second, bus.WithCreds(auth.File(creds, auth.Admin)), bus.WithInProcess(srv.Server))
	if err != nil {
		t.Fatalf("in-process client on a mutual-TLS server: %v", err)
	}
	defer admin.Close()
	if err := bus.Provision(ctx, admin.JS, protocol.NewNames(""), bus.DefaultLimits()); err != nil {
		t.Fatalf("provision in process: %v", err)
	}
	if n := srv.Server.NumClients(); n != 1 {
		t.Errorf("server counts %d clients, want the in-process one", n)
	}

	// The client role may not provision streams, in memory as over a socket.
	client, err := bus.Connect(ctx, srv.URL(), "client", 5*time.Second, bus.WithCreds(auth.File(creds, auth.Client)), bus.WithInProcess(srv.Server))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := client.JS.CreateStream(short, jetstream.StreamConfig{Name: "NOPE", Subjects: []string{"nope.>"}}); err == nil {
		t.Error("the client identity created a stream through an in-process connection")
	}
}

// A connection in memory writes its object stores through a second connection over the
// socket, with the TLS it was given, dialled on first use and closed with it (nats.go's object
// store Put leaks a goroutine when its acknowledgements come back as fast as memory brings
// them; see Conn.ObjectStores). A socket connection uses itself.
func TestInProcessConnectionsWriteObjectsOverTheSocket(t *testing.T) {
	srv, pki, creds, ctx := mutualTLSServer(t)

	c, err := bus.Connect(ctx, srv.URL(), "in-process", 5*time.Second, bus.WithCreds(auth.File(creds, auth.Admin)),
		bus.WithInProcess(srv.Server), bus.WithTLS(pki))
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.Server.NumClients(); n != 1 {
		t.Fatalf("server counts %d clients before any object store is used, want 1", n)
	}
	objJS, err := c.ObjectStores(ctx)
	if err != nil {
		t.Fatalf("object stores of an in-process connection on a mutual-TLS server: %v", err)
	}
	if objJS.Conn() == c.NC {
		t.Fatal("object stores use the in-memory connection")
	}
	if _, err := objJS.Conn().TLSConnectionState(); err != nil {
		t.Errorf("the object stores' connection is not over TLS: %v", err)
	}
	again, err := c.ObjectStores(ctx)
	if err != nil || again != objJS {
		t.Errorf("a second ObjectStores dialled again (%v)", err)
	}
	if n := srv.Server.NumClients(); n != 2 {
		t.Errorf("server counts %d clients, want the in-process one and the object stores' one", n)
	}
	obs, err := objJS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "objects-test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, "a", []byte("payload")); err != nil {
		t.Fatal(err)
	}
	if b, err := obs.GetBytes(ctx, "a"); err != nil || string(b) != "payload" {
		t.Errorf("object read back %q, %v", b, err)
	}

	c.Close()
	poll.Eventually(t, 10*time.Second, "both connections closed after Close", func() error {
		if n := srv.Server.NumClients(); n != 0 {
			return fmt.Errorf("%d clients left", n)
		}
		return nil
	})

	sock, err := bus.Connect(ctx, srv.URL(), "socket", 5*time.Second, bus.WithCreds(auth.File(creds, auth.Admin)), bus.WithTLS(pki))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	if js, err := sock.ObjectStores(ctx); err != nil || js != sock.JS {
		t.Errorf("a socket connection's object stores: %v, %v; want its own JetStream context", js, err)
	}
}
