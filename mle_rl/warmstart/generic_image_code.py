"""The text of the generic programs' image decision (`generic.py` composes it; the rest of the
program is in `generic_code.py`).

HEADER finds the images by what the files hold, not by the task's words: a column (the id
or a feature) whose values name image files of the task's folder or of its unpacked
archives, for at least 90% of the rows, preferring the file under a path that says `train`
or `test` for the rows of each; or columns whose cells are lists of 64 or more numbers (bands
of a picture, as JSON records give them, each made square); or, with no train table, the
pictures of a `train` folder labelled by their names (`cat.0.jpg` -> `cat`). It defines
`image(i, size)`: row i (train rows, then test rows) as a size x size x channels array in
[0, 1]. Each paragraph here turns every row's image into features appended to X and
X_test, so that every model family and feature step of the tabular grammar works on
images; on a task without images each does nothing, so a program that has one stays valid.
"""

# image -> (phrase, code)
_APPEND = '''\
    X, X_test = np.hstack([X, F[:len(X)]]), np.hstack([X_test, F[len(X):]])
    print("image features:", F.shape[1])
'''
IMAGE = {
    "pixels": ("the grey levels of each image shrunk to 16 x 16", '''\
if img_src is not None:
    F = np.stack([image(i, 16).mean(axis=2).ravel() for i in range(len(img_src))])
''' + _APPEND),
    "color": ("each image's colours: 8 x 8 thumbnails of every channel and 8-bin "
              "histograms of each", '''\
if img_src is not None:
    def colours(a):
        hist = [np.histogram(a[:, :, k], bins=8, range=(0, 1))[0] / a[:, :, k].size for k in range(a.shape[2])]
        small = a.reshape(8, 4, 8, 4, a.shape[2]).mean(axis=(1, 3))
        return np.concatenate([small.ravel(), *hist])
    F = np.stack([colours(image(i, 32)) for i in range(len(img_src))])
''' + _APPEND),
    "hog": ("histograms of edge directions (9 bins) over a 4 x 4 grid of each image at "
            "32 x 32, with the mean brightness of each cell", '''\
if img_src is not None:
    def edges(a):
        g = a.mean(axis=2)
        gy, gx = np.gradient(g)
        mag, ang = np.hypot(gx, gy), np.mod(np.arctan2(gy, gx), np.pi)
        bins = np.minimum((ang / np.pi * 9).astype(int), 8)
        out = []
        for r in range(4):
            for c in range(4):
                cell = (slice(8 * r, 8 * r + 8), slice(8 * c, 8 * c + 8))
                h = np.bincount(bins[cell].ravel(), weights=mag[cell].ravel(), minlength=9)
                out += list(h / (np.linalg.norm(h) + 1e-6)) + [g[cell].mean()]
        return np.array(out)
    F = np.stack([edges(image(i, 32)) for i in range(len(img_src))])
''' + _APPEND),
    "pca": ("the pixels of each image at 24 x 24 reduced to 48 principal components", '''\
if img_src is not None:
    from sklearn.decomposition import PCA
    P = np.stack([image(i, 24).ravel() for i in range(len(img_src))]).astype(np.float32)
    F = PCA(n_components=max(1, min(48, P.shape[0] - 1, P.shape[1])), random_state=0).fit_transform(P)
''' + _APPEND),
}
