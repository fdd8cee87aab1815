"""Build script for sample_factory.

setup.py is the single source of truth for package metadata and dependencies;
pyproject.toml only carries tool configuration (ruff, pytest) and the build-system table.
Exact, reproducible versions live in constraints.txt (see `make venv`).
"""

from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    "torch",
    "faster-fifo",
    "gymnasium>=1.0",
    "tensorboardX",
    "numpy",
    "psutil",
    "threadpoolctl",
    "pyyaml",  # the launcher's YAML sweep files
]

EXTRAS_REQUIRE = {
    "box2d": ["Box2D"],  # LunarLander, BipedalWalker, CarRacing: a prebuilt wheel (gymnasium[box2d] needs swig)
    "atari": ["ale-py", "opencv-python-headless"],
    "mujoco": ["mujoco", "gymnasium[mujoco]"],
    "vizdoom": ["vizdoom"],
    "minatar": ["minatar"],  # MinAtar/<Game>-v1 (envs/minatar.py)
    "envpool": ["envpool"],
    "pettingzoo": ["pettingzoo", "pygame-ce"],  # pygame-ce: PettingZoo's butterfly envs
    # gymnasium env packages used as they come (tests/envs/test_env_packages.py): their ids register on import
    "minigrid": ["minigrid"],  # grid worlds: a Dict of a 7x7 image, a direction and a text mission
    "popgym": ["popgym"],  # partially observable puzzles and control tasks, pure python
    # pygame-ce: gymnasium's classic-control and Box2D envs draw their frames with it (enjoy.py --save_video)
    "video": ["imageio", "imageio-ffmpeg", "pygame-ce"],
    "plot": ["matplotlib"],
    "onnx": ["onnx", "onnxruntime"],
    "wandb": ["wandb"],  # --with_wandb (Weights & Biases logging)
    "ray": ["ray[default]"],  # the launcher's ray backend (--backend=ray) and remote samplers (--sampler_nodes)
    "dev": ["pytest", "pytest-timeout", "pytest-xdist", "ruff", "mypy"],
}

setup(
    name="sample_factory",
    version="0.1.0",
    description="Asynchronous multi-process PPO/APPO reinforcement learning framework",
    python_requires=">=3.10",
    packages=find_packages(include=["sample_factory", "sample_factory.*"]),  # benchmarks/, tests/: the repo only
    package_data={"sample_factory.launcher": ["*.sh", "*.sbatch"]},  # the local Slurm script, the sbatch template
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={
        "console_scripts": [
            "sf-train=sample_factory.train:main",
            "sf-enjoy=sample_factory.evaluation.enjoy:main",
            "sf-export-onnx=sample_factory.evaluation.export_onnx:main",
            "sf-plot=sample_factory.tools.plot:main",
            "sf-tune=sample_factory.tools.tune:main",
            "sf-launch=sample_factory.launcher.__main__:main",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
