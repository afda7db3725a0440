# SPDX-License-Identifier: Apache-2.0
# Messages larger than a frame (net/document.h): DOCUMENT streams gathered
# whole, resumed after a lost chunk, refused when they are not a message of
# the right size or fail their digest. No sockets.
xf_add_test(test_document SOURCES test_document.c LIBS xf_conn LABELS unit TIMEOUT 60)
