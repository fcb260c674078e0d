"""Builds libbulwark.so into the package (bulwark/_native/) on `pip install ./python`.

The library comes from the repository's CMake build in SDK-only mode (-DBULWARK_SDK_ONLY=ON:
only the SDK, the checkpoint engine and their common code; it needs a C++20 compiler,
CMake, nlohmann-json and libxxhash). Set BULWARK_LIB to a built libbulwark.so to package
that one instead (no compiler needed).
"""
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform, not `any`."""

    def has_ext_modules(self):
        return True


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("BULWARK_LIB")
        if lib:
            if not os.path.isfile(lib):
                raise SystemExit(f"BULWARK_LIB={lib} does not exist")
        else:
            if not os.path.isfile(os.path.join(REPO, "CMakeLists.txt")):
                raise SystemExit("building libbulwark.so needs the Bulwark repository around "
                                 f"{HERE} (or set BULWARK_LIB to a built library)")
            build = tempfile.mkdtemp(prefix="bulwark-sdk-build.")
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", REPO, "-B", build, *gen,
                                   "-DBULWARK_SDK_ONLY=ON", "-DCMAKE_BUILD_TYPE=Release"])
            subprocess.check_call(["cmake", "--build", build, "--target", "bulwark",
                                   "-j", str(os.cpu_count() or 2)])
            lib = os.path.join(build, "lib", "libbulwark.so")
        dest = os.path.join(self.build_lib, "bulwark", "_native")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(lib, os.path.join(dest, "libbulwark.so"))


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
