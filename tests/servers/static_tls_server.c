/*
 * A minimal blocking TLS server with OpenSSL linked in statically: SSL_do_handshake lives
 * in the executable, not in a libssl.so. Used to test that hstrace finds the symbol there.
 * Usage: static_tls_server PORT CERT KEY
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	int one = 1, ls;
	SSL_CTX *ctx;

	if (argc != 4) {
		fprintf(stderr, "usage: %s PORT CERT KEY\n", argv[0]);
		return 2;
	}
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || SSL_CTX_use_certificate_file(ctx, argv[2], SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[3], SSL_FILETYPE_PEM) != 1)
		return 1;
	ls = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	addr.sin_port = htons(atoi(argv[1]));
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(ls, (struct sockaddr *)&addr, sizeof(addr)) || listen(ls, 64))
		return 1;
	for (;;) {
		char buf[1024];
		int fd = accept(ls, NULL, NULL);
		SSL *ssl;

		if (fd < 0)
			continue;
		ssl = SSL_new(ctx);
		SSL_set_fd(ssl, fd);
		/* SSL_accept reaches SSL_do_handshake, which is what hstrace hooks */
		if (SSL_accept(ssl) == 1 && SSL_read(ssl, buf, sizeof(buf)) > 0)
			SSL_write(ssl, "HTTP/1.0 200 OK\r\n\r\nok\n", 23);
		SSL_shutdown(ssl);
		SSL_free(ssl);
		close(fd);
	}
}
