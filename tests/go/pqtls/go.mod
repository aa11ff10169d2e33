module hstrace.test/pqtls

go 1.26
